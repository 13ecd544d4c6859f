package replicabus

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/seal/sealtest"
	"github.com/manifold-mcp/manifold/internal/session"
	"github.com/manifold-mcp/manifold/internal/testredis"
)

// testSealer seals the messages of the tests' buses and event logs, as the replicas of one
// gateway would.
var testSealer = sealtest.Sealer(seal.PurposeBus, "k1", 1)

// TestBusSealsMessages: what replicas publish to each other is sealed (whoever reads Redis
// sees neither the messages nor what they carry), and a replica drops what does not open
// with its keys: a message sealed with other keys, one sent in the clear, and a sealed one
// moved to another channel.
func TestBusSealsMessages(t *testing.T) {
	ctx := context.Background()
	stores := replicaStores(t, 2)
	var logs lockedLog
	otherStore := &replica{RedisStore: stores[0].RedisStore, shared: stores[0].shared}
	otherStore.shared.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	monitored := testredis.Monitor(t, testredis.Addr(t))
	a, b := startBus(t, stores[0], "a", 0), startBus(t, stores[1], "b", 0)
	other := newTestBus(otherStore, "other", 0) // a replica with other keys
	other.opts.Sealer = sealtest.Sealer(seal.PurposeBus, "k9", 9)
	runBus(t, other)

	const secret = "a-token-on-its-way-to-another-replica"
	id := session.NewID()
	if err := b.Follow(ctx, id); err != nil {
		t.Fatal(err)
	}
	defer b.Unfollow(id)
	if ok, err := a.Send(ctx, "b", &session.BusMessage{Kind: "sent", Text: secret}); err != nil || !ok {
		t.Fatalf("Send = %v, %v", ok, err)
	}
	for range 2 { // two that the replica with other keys drops
		if err := a.Broadcast(ctx, &session.BusMessage{Kind: "broadcast", Text: secret}); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := a.Publish(ctx, session.Digest(id), &session.BusMessage{Kind: "published", Text: secret}); err != nil || !ok {
		t.Fatalf("Publish = %v, %v", ok, err)
	}
	if err := a.PublishAll(ctx, []session.Post{{Replica: "b", Msg: &session.BusMessage{Kind: "posted", Text: secret}}}); err != nil {
		t.Fatal(err)
	}
	log := stores[0].NewEventLog(&session.EventLogOptions{Sealer: testSealer})
	defer log.Close()
	log.Start(id, "st", []byte(`[1]`))
	log.Append(id, "st", []session.LoggedEvent{{Seq: 1, Data: []byte(secret)}}, true)
	for _, kind := range []string{"sent", "broadcast", "published", "posted"} {
		b.rec.await(t, kind+" reaching b", hasMsg(kind, secret))
	}
	b.rec.await(t, "the events reaching b", func(msgs []session.BusMessage, _ []goneCall) bool {
		for _, m := range msgs {
			if m.Kind == session.BusEvents && len(m.Events) == 1 && string(m.Events[0].Data) == secret {
				return true
			}
		}
		return false
	})

	// Dropped by a replica with other keys; in the clear, or moved to another channel, by one
	// with the same keys. Each receiver's own marker comes after them.
	raw := redis.NewClient(&redis.Options{Addr: testredis.Addr(t), DisableIdentity: true})
	defer raw.Close()
	moved := testSealer.Seal([]byte(`{"k":"moved","t":"x"}`), []byte(a.replicaChannel("b")))
	for _, p := range []struct{ channel, payload string }{
		{a.replicaChannel("b"), `{"k":"clear","t":"x"}`},
		{a.replicaChannel("a"), string(moved)},
	} {
		if err := raw.Publish(ctx, p.channel, p.payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	mark(t, a, a, b)
	mark(t, other, other)
	for _, tb := range []*testBus{a, b} {
		if got := append(tb.rec.of("clear"), tb.rec.of("moved")...); len(got) != 0 {
			t.Errorf("%s received messages that do not open: %s", tb.Replica(), describeMsgs(got))
		}
	}
	if got := other.rec.of("broadcast"); len(got) != 0 {
		t.Errorf("a replica with other keys received %s", describeMsgs(got))
	}
	// It dropped a's two broadcasts, and warned once: at most once a minute.
	if n := strings.Count(logs.String(), "do not open with this replica's keys"); n != 1 {
		t.Errorf("the replica with other keys warned %d times of what it dropped, want once:\n%s", n, logs.String())
	}

	lines := monitored()
	publishes := 0
	for _, line := range lines {
		if !strings.Contains(line, `"publish"`) {
			continue // the event log keeps events as they are: what it publishes is checked
		}
		publishes++
		if strings.Contains(line, secret) || strings.Contains(line, `\"k\":\"`) && !strings.Contains(line, `clear`) {
			t.Errorf("a message published holds what it carries: %s", line)
		}
	}
	if publishes == 0 {
		t.Errorf("MONITOR saw no PUBLISH among %d commands", len(lines))
	}
}

// lockedLog is a log output that goroutines may write at once.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
