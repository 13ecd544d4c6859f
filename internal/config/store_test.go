package config_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/manifold-mcp/manifold/internal/config"
)

func TestSessionStore(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       config.SessionStore
	}{
		{"default", "upstreams: []\n", config.SessionStore{Type: "memory", KeyPrefix: "manifold", DialTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}},
		{"redis by url", `session_store:
  type: redis
  url: rediss://gw:secret@redis.internal:6380/2
  key_prefix: "mf:prod"
  read_timeout: 250ms
  pool_size: 20
  replica_lease: 3s
upstreams: []
`, config.SessionStore{Type: "redis", URL: "rediss://gw:secret@redis.internal:6380/2", KeyPrefix: "mf:prod", DialTimeout: 2 * time.Second, ReadTimeout: 250 * time.Millisecond, WriteTimeout: time.Second, PoolSize: 20, ReplicaLease: 3 * time.Second}},
		{"redis by sentinel", `session_store:
  type: redis
  sentinel: {master: mymaster, addrs: ["10.0.0.1:26379", "10.0.0.2:26379"]}
  username: gw
  password: ${REDIS_PASSWORD}
  tls: true
upstreams: []
`, config.SessionStore{Type: "redis", SentinelMaster: "mymaster", SentinelAddrs: []string{"10.0.0.1:26379", "10.0.0.2:26379"}, Username: "gw", Password: "pw", TLS: true,
			KeyPrefix: "manifold", DialTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}},
		{"redis cluster", "session_store: {type: redis, cluster: {addrs: [\"a:7000\", \"b:7000\"]}}\nupstreams: []\n",
			config.SessionStore{Type: "redis", ClusterAddrs: []string{"a:7000", "b:7000"}, KeyPrefix: "manifold", DialTimeout: 2 * time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := config.Parse("gw.yaml", []byte(tt.yaml+testKeysYAML), env(map[string]string{"REDIS_PASSWORD": "pw"}))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, cfg.SessionStore); diff != "" {
				t.Errorf("SessionStore (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSessionStoreProblems(t *testing.T) {
	p := func(line int, field, msg string) config.Problem {
		return config.Problem{File: "gw.yaml", Line: line, Field: field, Message: msg}
	}
	tests := []struct {
		name, yaml string
		want       []config.Problem
	}{
		{"unknown type", "session_store: {type: etcd}\nupstreams: []\n", []config.Problem{
			p(1, "session_store.type", `"etcd" is not a session store: use memory (one replica) or redis (shared by replicas)`),
		}},
		{"redis keys with memory", "session_store:\n  url: redis://localhost:6379\nupstreams: []\n", []config.Problem{
			p(2, "session_store.url", "only with type: redis: set type: redis to keep sessions in Redis, or remove it"),
		}},
		{"redis without an address", "session_store:\n  type: redis\nupstreams: []\n", []config.Problem{
			p(1, "session_store", "type redis needs where Redis is: url (like redis://127.0.0.1:6379/0), sentinel or cluster"),
		}},
		{"two addresses", "session_store:\n  type: redis\n  url: redis://a:6379\n  cluster: {addrs: [\"b:7000\"]}\nupstreams: []\n", []config.Problem{
			p(1, "session_store", "url, sentinel and cluster are alternatives: keep one"),
		}},
		{"bad url, not quoted", "session_store:\n  type: redis\n  url: http://user:hunter2@host\nupstreams: []\n", []config.Problem{
			p(3, "session_store.url", "not a Redis URL: want redis://host:port[/db] or rediss:// for TLS, like redis://127.0.0.1:6379/0"),
		}},
		{"credentials beside a url", "session_store:\n  type: redis\n  url: redis://a:6379\n  password: x\nupstreams: []\n", []config.Problem{
			p(4, "session_store.password", "with url, write it in the URL (rediss:// for TLS, user:password@ for ACL), or use sentinel or cluster"),
		}},
		{"sentinel without master and with a bad address", "session_store:\n  type: redis\n  sentinel:\n    addrs: [nohost]\nupstreams: []\n", []config.Problem{
			p(3, "session_store.sentinel.master", "required: the name of the master the sentinels monitor, like mymaster"),
			p(4, "session_store.sentinel.addrs[0]", `"nohost" is not host:port`),
		}},
		{"limits", "session_store:\n  type: redis\n  url: redis://a:6379\n  key_prefix: \"a b\"\n  read_timeout: 0s\n  pool_size: -1\n  replica_lease: 100ms\nupstreams: []\n", []config.Problem{
			p(4, "session_store.key_prefix", `"a b" is not a key prefix: use 1 to 64 characters from A-Z a-z 0-9 _ - . :`),
			p(5, "session_store.read_timeout", "must be greater than 0, like 1s: a request that needs Redis fails after it when Redis is gone"),
			p(6, "session_store.pool_size", "must be 0 (the client's default) or more"),
			p(7, "session_store.replica_lease", "must be at least 500ms, like 10s: how long a replica that stopped keeps what it owned before the others take over"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tt.yaml+testKeysYAML), nil)
			checkProblems(t, "Parse", err, tt.want)
		})
	}
}
