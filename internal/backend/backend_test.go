package backend_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/internal/approval"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/config"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testredis"
)

func TestMain(m *testing.M) { testredis.Main(m) }

func parse(t *testing.T, yaml string) *config.Config {
	t.Helper()
	cfg, err := config.Parse("test.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// TestOpenBuildsTheSetTheConfigNames: the default config keeps everything in this process,
// with no bus (one replica); a Redis session_store puts every backend on it, with a bus,
// and what one Set writes another on the same prefix reads. Close releases the client.
func TestOpenBuildsTheSetTheConfigNames(t *testing.T) {
	addr := testredis.Addr(t)
	redisYAML := fmt.Sprintf("keys: [{id: test, secret: \"dGhlIGtleSBvZiB0aGUgZ2F0ZXdheSB0ZXN0cyAwMTIz\"}]\nsession_store:\n  type: redis\n  url: redis://%s/0\n  key_prefix: %s\nupstreams: []\n", addr, testredis.Prefix(t, addr))
	tests := []struct {
		name   string
		yaml   string
		shared bool
	}{
		{"memory", "upstreams: []\n", false},
		{"redis", redisYAML, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			cfg := parse(t, tt.yaml)
			a, err := backend.Open(cfg, time.Now, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			b, err := backend.Open(cfg, time.Now, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if a.Sessions == nil || a.Holds == nil || a.Ended == nil {
				t.Fatalf("a set without its required stores: %+v", a)
			}
			for name, set := range map[string]bool{
				"Bus": a.Bus != nil, "Events": a.Events != nil, "Digests": a.Digests != nil, "Connections": a.Connections != nil,
				"Approvals": a.Approvals != nil, "Pins": a.Pins != nil, "Limits": a.Limits != nil, "Ping": a.Ping != nil,
			} {
				if set != tt.shared {
					t.Errorf("%s set = %v, want %v", name, set, tt.shared)
				}
			}
			rec, err := a.Sessions.Create(ctx, session.Record{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatal(err)
			}
			call := approval.HeldCall{ID: approval.NewID(), Tool: "t", Held: time.Now(), Deadline: time.Now().Add(time.Minute)}
			if err := a.Holds.Hold(ctx, call); err != nil {
				t.Fatal(err)
			}
			_, errSession := b.Sessions.Get(ctx, rec.ID)
			_, errHold := b.Holds.Get(ctx, call.ID)
			if shared := errSession == nil && errHold == nil; shared != tt.shared {
				t.Errorf("another set on the same config reads the session (%v) and the held call (%v); want shared %v", errSession, errHold, tt.shared)
			}
			if tt.shared {
				if err := a.Ping(ctx); err != nil {
					t.Errorf("Ping = %v", err)
				}
			}
			if err := a.Close(); err != nil {
				t.Errorf("Close = %v", err)
			}
			if tt.shared {
				if err := a.Ping(ctx); err == nil {
					t.Error("Ping after Close succeeded: the client is still open")
				}
			}
		})
	}
}
