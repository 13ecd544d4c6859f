package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/manifold-mcp/manifold/gateway"
	"github.com/manifold-mcp/manifold/internal/backend"
	"github.com/manifold-mcp/manifold/internal/session"
)

// countingStore is a MemoryStore that notes every operation the gateway makes on it, in order.
// withSessions is the in-memory backends over ms, with sessions (which wraps ms) as their
// sessions store.
func withSessions(ms *session.MemoryStore, sessions session.Store) *backend.Set {
	set := backend.NewMemory(ms)
	set.Sessions = sessions
	return set
}

type countingStore struct {
	*session.MemoryStore
	mu  sync.Mutex
	ops []string
}

func (s *countingStore) note(op string) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.mu.Unlock()
}

func (s *countingStore) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ops := s.ops
	s.ops = nil
	return ops
}

func (s *countingStore) Create(ctx context.Context, r session.Record) (*session.Record, error) {
	s.note("Create")
	return s.MemoryStore.Create(ctx, r)
}
func (s *countingStore) Get(ctx context.Context, id string) (*session.Record, error) {
	s.note("Get")
	return s.MemoryStore.Get(ctx, id)
}
func (s *countingStore) Touch(ctx context.Context, id string) error {
	s.note("Touch")
	return s.MemoryStore.Touch(ctx, id)
}
func (s *countingStore) Update(ctx context.Context, id string, f func(*session.Record)) (*session.Record, error) {
	s.note("Update")
	return s.MemoryStore.Update(ctx, id, f)
}
func (s *countingStore) Delete(ctx context.Context, id string) error {
	s.note("Delete")
	return s.MemoryStore.Delete(ctx, id)
}
func (s *countingStore) Expire(ctx context.Context, cutoff time.Time) ([]string, error) {
	s.note("Expire")
	return s.MemoryStore.Expire(ctx, cutoff)
}
func (s *countingStore) PutReverse(ctx context.Context, r session.ReverseRecord) error {
	s.note("PutReverse")
	return s.MemoryStore.PutReverse(ctx, r)
}
func (s *countingStore) TakeReverse(ctx context.Context, sid, id string) (session.ReverseRecord, error) {
	s.note("TakeReverse")
	return s.MemoryStore.TakeReverse(ctx, sid, id)
}
func (s *countingStore) ReverseByUpstream(ctx context.Context, up, id string) (session.ReverseRecord, error) {
	s.note("ReverseByUpstream")
	return s.MemoryStore.ReverseByUpstream(ctx, up, id)
}
func (s *countingStore) PutTask(ctx context.Context, t session.TaskRecord) error {
	s.note("PutTask")
	return s.MemoryStore.PutTask(ctx, t)
}
func (s *countingStore) Task(ctx context.Context, id string) (session.TaskRecord, error) {
	s.note("Task")
	return s.MemoryStore.Task(ctx, id)
}

// TestToolCallMakesOneStoreOperationBeforeForwarding: a tools/call reads its session once;
// marking the session used comes after its answer (design.md: one store operation per
// tools/call at most before forwarding, for a shared store is a network round trip).
func TestToolCallMakesOneStoreOperationBeforeForwarding(t *testing.T) {
	store := &countingStore{MemoryStore: session.NewMemoryStore(nil)}
	tg := startGateway(t, "listen: 127.0.0.1:0\nupstreams:"+upstreamYAML("a", "alpha", ""), &gateway.Options{Backends: withSessions(store.MemoryStore, store), ExpiryInterval: time.Hour})
	t.Cleanup(tg.close)
	// A raw client: no standalone stream of its own, whose requests would mix in.
	c := rawClient{t: t, url: tg.url}
	sid := c.initializeAs("2025-11-25", `{}`)
	waitUntil(t, "the session's start", func() bool { return slices.Contains(store.take(), "Touch") })
	for i := range 3 {
		r := c.do(http.MethodPost, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"x"}}}`, map[string]string{"Mcp-Session-Id": sid})
		if r.status != http.StatusOK || r.msg.Error != nil {
			t.Fatalf("call %d: %d %s", i, r.status, r.body)
		}
		var ops []string
		waitUntil(t, "the call's mark of use", func() bool {
			ops = append(ops, store.take()...)
			return slices.Contains(ops, "Touch")
		})
		if got := strings.Join(ops, ","); got != "Get,Touch" {
			t.Errorf("call %d made store operations %s, want Get,Touch (the Touch after the answer)", i, got)
		}
	}
}
