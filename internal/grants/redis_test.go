package grants

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

func TestMain(m *testing.M) { testredis.Main(m) }

// redisBacking returns the backing of Vaults on the test Redis, under a key prefix of t's
// own (deleted when t ends); it skips t when there is no Redis.
func redisBacking(t *testing.T) (backing, *redis.Client, string) {
	addr := testredis.Addr(t)
	prefix := testredis.Prefix(t, addr)
	testwait.Goroutines(t)
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	t.Cleanup(func() { _ = c.Close() })
	keys := testKeys(t)
	hashKey := func(p Principal) string { return prefix + ":grants:{" + p.Hash() + "}" }
	ctx := context.Background()
	return backing{
		open: func(t *testing.T, opts *Options) *Vault {
			v := NewRedisVault(c, prefix, keys, opts)
			t.Cleanup(func() { _ = v.Close() })
			return v
		},
		raw: func(t *testing.T, p Principal, upstream string) []byte {
			b, err := c.HGet(ctx, hashKey(p), upstream).Bytes()
			if err != nil {
				t.Fatal(err)
			}
			return b
		},
		setRaw: func(t *testing.T, p Principal, upstream string, v []byte) {
			if err := c.HSet(ctx, hashKey(p), upstream, v).Err(); err != nil {
				t.Fatal(err)
			}
		},
		everything: func(t *testing.T) [][]byte {
			keys, err := testredis.Keys(addr, prefix)
			if err != nil {
				t.Fatal(err)
			}
			var out [][]byte
			for _, k := range keys {
				out = append(out, []byte(k))
				switch typ := c.Type(ctx, k).Val(); typ {
				case "hash":
					for f, v := range c.HGetAll(ctx, k).Val() {
						out = append(out, []byte(f), []byte(v))
					}
				case "string":
					out = append(out, []byte(c.Get(ctx, k).Val()))
				case "zset":
					for _, m := range c.ZRange(ctx, k, 0, -1).Val() {
						out = append(out, []byte(m))
					}
				default:
					t.Fatalf("key %s of type %s, which the scan does not read", k, typ)
				}
			}
			return out
		},
	}, c, prefix
}

func TestRedisVault(t *testing.T) {
	runContract(t, func(t *testing.T) backing { b, _, _ := redisBacking(t); return b })
}

// TestRedisKeys: a principal's grants and refresh locks share one hash tag (a cluster
// slot), no key names a user, and everything is under the prefix.
func TestRedisKeys(t *testing.T) {
	b, c, prefix := redisBacking(t)
	ctx := context.Background()
	v := b.open(t, nil)
	for _, up := range []string{"github", "jira"} {
		if err := v.Put(ctx, grant(alice, up, 0)); err != nil {
			t.Fatal(err)
		}
	}
	release, ok, err := v.st.tryLock(ctx, alice, "github", 2*defaultRefreshTimeout)
	if err != nil || !ok {
		t.Fatalf("tryLock: %v, %v", ok, err)
	}
	if _, ok, _ := v.st.tryLock(ctx, alice, "github", 2*defaultRefreshTimeout); ok {
		t.Error("the refresh lock was taken twice")
	}
	keys, err := testredis.Keys(testredis.Addr(t), prefix)
	if err != nil {
		t.Fatal(err)
	}
	tag := "{" + alice.Hash() + "}"
	want := map[string]bool{prefix + ":grants:index": true, prefix + ":grants:" + tag: true, prefix + ":grants:" + tag + ":refresh:github": true}
	got := map[string]bool{}
	for _, k := range keys {
		got[k] = true
		if strings.Contains(k, "alice") || strings.Contains(k, "idp.example") {
			t.Errorf("key %s names the user", k)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("keys mismatch (-want +got):\n%s", diff)
	}
	if ttl := c.PTTL(ctx, prefix+":grants:"+tag+":refresh:github").Val(); ttl <= 0 {
		t.Errorf("the refresh lock has ttl %v, want one", ttl)
	}
	release()
	if n := c.Exists(ctx, prefix+":grants:"+tag+":refresh:github").Val(); n != 0 {
		t.Error("release left the lock")
	}
	// A lock another holder took since is not freed by the old holder's release.
	release2, _, _ := v.st.tryLock(ctx, alice, "github", 2*defaultRefreshTimeout)
	c.Set(ctx, prefix+":grants:"+tag+":refresh:github", "someone-else", 0)
	release2()
	if n := c.Exists(ctx, prefix+":grants:"+tag+":refresh:github").Val(); n != 1 {
		t.Error("a release freed a lock it no longer held")
	}
}
