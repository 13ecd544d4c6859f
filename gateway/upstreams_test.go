package gateway

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/manifold-mcp/manifold/internal/catalog"
	"github.com/manifold-mcp/manifold/internal/hub"
	"github.com/manifold-mcp/manifold/internal/protocol"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/upstream"
)

func TestConnKey(t *testing.T) {
	ns := &catalog.Namespace{Name: "up"}
	shared := newUpstreamEntry(ns, &fakeUpstream{name: "up"}, false)
	isolated := newUpstreamEntry(ns, &fakeUpstream{name: "up"}, false)
	isolated.pool = &connPool{}
	own := &conn{upstream: isolated, client: &fakeUpstream{name: "up"}, session: "s1"}
	tests := []struct {
		name      string
		key, want string
	}{
		{name: "shared connection", key: shared.shared.connKey(""), want: "up"},
		{name: "shared upstream, for a session", key: shared.connKey("s1"), want: "up"},
		{name: "isolated upstream's shared connection", key: isolated.shared.connKey(""), want: "up"},
		{name: "isolated upstream, for a session", key: isolated.connKey("s1"), want: "up\x00s1"},
		{name: "a session's own connection", key: own.connKey(""), want: "up\x00s1"},
		{name: "a session's own connection, asked for another", key: own.connKey("s2"), want: "up\x00s1"},
	}
	for _, tt := range tests {
		if tt.key != tt.want {
			t.Errorf("%s: connKey = %q, want %q", tt.name, tt.key, tt.want)
		}
	}
}

// TestOwnConnectionLogsNeverBroadcast: broadcast_logs is about the shared connection. A log
// message from a session's own connection that cannot reach its session (not served here)
// is dropped, never shown to the other sessions.
func TestOwnConnectionLogsNeverBroadcast(t *testing.T) {
	g := emptyGateway(t, nil)
	up := &fakeUpstream{name: "lg", server: &protocol.InitializeResult{ProtocolVersion: protocol.LatestVersion}}
	useFakeUpstreams(g, up)
	u := g.upstreamList()[0]
	u.broadcastLogs = true

	rec, err := g.store.Create(context.Background(), session.Record{ProtocolVersion: protocol.LatestVersion})
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := g.openLive(rec)
	if err != nil {
		t.Fatal(err)
	}
	_, stream, err := bystander.OpenStandalone()
	if err != nil {
		t.Fatal(err)
	}
	take := func() []hub.Event { events, _, _ := stream.Next(); return events }
	note := &protocol.Notification{Method: protocol.NotificationMessage, Params: json.RawMessage(`{"level":"info","data":"x"}`)}

	own := &conn{upstream: u, client: up, session: "served-elsewhere", pooled: "served-elsewhere"}
	g.logs.deliver(own, note, upstream.Origin{})
	if batch := take(); len(batch) != 0 {
		t.Errorf("a log of another session's own connection reached a bystander: %d events", len(batch))
	}
	// Nor one of another principal's connection (isolation: principal).
	principals := &conn{upstream: u, client: up, pooled: "p:r1:https://idp\x00alice"}
	g.logs.deliver(principals, note, upstream.Origin{})
	if batch := take(); len(batch) != 0 {
		t.Errorf("a log of another principal's own connection reached a bystander: %d events", len(batch))
	}
	g.logs.deliver(u.shared, note, upstream.Origin{})
	if batch := take(); len(batch) != 1 {
		t.Errorf("a log of the shared connection reached the session %d times, want once (broadcast_logs)", len(batch))
	}
}
