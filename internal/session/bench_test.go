package session

import (
	"context"
	"testing"
	"time"
)

func BenchmarkMemoryStoreGet(b *testing.B) {
	s := NewMemoryStore(nil)
	ctx := context.Background()
	ids := make([]string, 1000)
	for i := range ids {
		rec, err := s.Create(ctx, Record{ProtocolVersion: "2025-11-25"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = rec.ID
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := s.Get(ctx, ids[i%len(ids)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRedisGetTouch measures what the gateway spends on the store for each request of
// a session (Get before, Touch after) against a raw PING round trip to the same Redis: the
// Touch of a session read just before costs no round trip, so the two should be close.
func BenchmarkRedisGetTouch(b *testing.B) {
	s := OpenTestRedisStore(b, RedisOptions{IdleTimeout: time.Hour})
	ctx := context.Background()
	rec, err := s.Create(ctx, Record{ProtocolVersion: "2025-11-25", ClientCapabilities: []byte(`{"sampling":{},"roots":{"listChanged":true}}`)})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("ping", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.client.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("get+touch", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Get(ctx, rec.ID); err != nil {
				b.Fatal(err)
			}
			if err := s.Touch(ctx, rec.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
}
