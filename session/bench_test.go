package session

import (
	"context"
	"testing"
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
