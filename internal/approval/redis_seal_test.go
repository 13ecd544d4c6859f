package approval

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/seal"
	"github.com/manifold-mcp/manifold/internal/seal/sealtest"
)

// testSealer seals what the tests' stores keep of a call's session.
var testSealer = sealtest.Sealer(seal.PurposeHold, "k1", 1)

// TestRedisStoreSealsTheSessionID: a held call's record in Redis does not hold its session's
// id, which every read gives back (Get, a listing, Decide, Move); a record of a release
// before sealing ("sid" in the clear) is read as it is; a store with other keys reads the
// call without the session's id.
func TestRedisStoreSealsTheSessionID(t *testing.T) {
	ctx := t.Context()
	client, prefix := openRedis(t)
	s := NewRedisHeldCalls(client, prefix, testSealer)
	base := now()
	const sid = "a-live-session-id-0123456789"
	tests := []struct {
		name string
		// write stores the call, as this release or another.
		write func(t *testing.T, c HeldCall)
		// reader reads it back.
		reader *RedisHeldCalls
		wantID string
		sealed bool
	}{
		{name: "this release", write: func(t *testing.T, c HeldCall) { mustHold(t, s, c) }, reader: s, wantID: sid, sealed: true},
		{name: "a release before sealing", write: func(t *testing.T, c HeldCall) {
			val, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if err := client.Set(ctx, prefix+":hold:"+c.ID, val, time.Hour).Err(); err != nil {
				t.Fatal(err)
			}
			if err := client.ZAdd(ctx, prefix+":holds", redis.Z{Score: float64(c.Deadline.UnixMilli()), Member: c.ID}).Err(); err != nil {
				t.Fatal(err)
			}
		}, reader: s, wantID: sid},
		{name: "read with other keys", write: func(t *testing.T, c HeldCall) { mustHold(t, s, c) },
			reader: NewRedisHeldCalls(client, prefix, sealtest.Sealer(seal.PurposeHold, "k9", 9)), sealed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := call(base, base.Add(10*time.Minute))
			c.SessionID, c.StreamID, c.Replica = sid, "st-1", "r1"
			tt.write(t, c)
			raw, err := client.Get(ctx, prefix+":hold:"+c.ID).Result()
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Contains([]byte(raw), []byte(sid)); got == tt.sealed {
				t.Errorf("the record holds the session id: %v, want %v: %s", got, !tt.sealed, raw)
			}
			got := mustGet(t, tt.reader, c.ID)
			if got.SessionID != tt.wantID || got.StreamID != "st-1" {
				t.Errorf("Get: session %q stream %q, want %q st-1", got.SessionID, got.StreamID, tt.wantID)
			}
			all, err := tt.reader.All(ctx)
			if err != nil || len(all) == 0 || all[len(all)-1].SessionID != tt.wantID {
				t.Errorf("All: %+v, %v; want the last with session %q", all, err, tt.wantID)
			}
			if tt.reader != s {
				return
			}
			moved, err := s.Move(ctx, c.ID, "r2")
			if err != nil || moved.SessionID != sid {
				t.Errorf("Move: %+v, %v", moved, err)
			}
			if decided, err := s.Decide(ctx, c.ID, Approve, "ops", base); err != nil || decided.SessionID != sid {
				t.Errorf("Decide: %+v, %v", decided, err)
			}
			raw, _ = client.Get(ctx, prefix+":hold:"+c.ID).Result()
			if bytes.Contains([]byte(raw), []byte(sid)) {
				t.Errorf("the record, moved and decided, holds the session id: %s", raw)
			}
			if got := mustGet(t, s, c.ID); got.SessionID != sid || got.Replica != "r2" || got.Decision != Approve {
				t.Errorf("after Move and Decide: %+v", got)
			}
		})
	}
}

// TestRedisStoreKeepsWhatItCannotOpen: a replica without the key a call's session id was
// sealed with (a rotation done out of order) may still move or decide the call; it writes
// the sealed id back as it was, so that a replica with the key can take the call over.
func TestRedisStoreKeepsWhatItCannotOpen(t *testing.T) {
	ctx := t.Context()
	client, prefix := openRedis(t)
	withKey := NewRedisHeldCalls(client, prefix, testSealer)
	withoutKey := NewRedisHeldCalls(client, prefix, sealtest.Sealer(seal.PurposeHold, "k9", 9))
	base := now()
	c := call(base, base.Add(10*time.Minute))
	c.SessionID, c.StreamID, c.Replica = "a-live-session-id-0123456789", "st-1", "r1"
	mustHold(t, withKey, c)
	if _, err := withoutKey.Move(ctx, c.ID, "r2"); err != nil {
		t.Fatalf("Move without the key: %v", err)
	}
	if _, err := withoutKey.Decide(ctx, c.ID, Approve, "ops", base); err != nil {
		t.Fatalf("Decide without the key: %v", err)
	}
	got := mustGet(t, withKey, c.ID)
	if got.SessionID != c.SessionID || got.Replica != "r2" || got.Decision != Approve {
		t.Errorf("read with the key after a replica without it moved and decided the call: session %q replica %q decision %q; want %q r2 %s",
			got.SessionID, got.Replica, got.Decision, c.SessionID, Approve)
	}
}
