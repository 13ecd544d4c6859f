package session

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestGetByDigest: a replica that knows a session only by its digest reads its record
// (without the id, which it does not know); an unknown digest is ErrNotFound.
func TestGetByDigest(t *testing.T) {
	ctx := context.Background()
	first := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute})
	stores := []*RedisStore{first, OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, KeyPrefix: first.opts.KeyPrefix})}
	alice := Principal{Issuer: "https://issuer", Subject: "alice"}
	rec, err := stores[0].Create(ctx, Record{LogLevel: "debug", Principal: alice, Subscriptions: []string{"file:///a"}})
	if err != nil {
		t.Fatal(err)
	}
	// What a replica that never saw the id reads: all but the id.
	stored := &Record{LogLevel: "debug", Principal: alice, Subscriptions: []string{"file:///a"}, CreatedAt: rec.CreatedAt}
	for _, tc := range []struct {
		name    string
		store   *RedisStore
		digest  string
		want    *Record
		wantErr error
	}{
		{"on the replica that created it", stores[0], Digest(rec.ID), stored, nil},
		{"on another replica", stores[1], Digest(rec.ID), stored, nil},
		{"an unknown digest", stores[1], Digest(NewID()), nil, ErrNotFound},
		{"the id instead of the digest", stores[1], rec.ID, nil, ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.store.GetByDigest(ctx, tc.digest)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("GetByDigest = %+v, %v; want error %v", got, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })); diff != "" {
				t.Errorf("GetByDigest (-want +got):\n%s", diff)
			}
		})
	}
}
