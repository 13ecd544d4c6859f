package config

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Kinds of session store (SessionStore.Type).
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

// Defaults of a Redis session store.
const (
	defaultStoreKeyPrefix    = "manifold"
	defaultStoreDialTimeout  = 2 * time.Second
	defaultStoreReadTimeout  = time.Second
	defaultStoreWriteTimeout = time.Second
)

// SessionStore says where sessions, their routing tables and task records live (key
// `session_store`): in this process's memory (the default, for one replica) or in Redis, which
// several replicas share.
type SessionStore struct {
	// Type is StoreMemory or StoreRedis (key `type`). Defaults to "memory"; the other keys
	// are for "redis" only.
	Type string

	// URL is the Redis server (key `url`): redis://[user:password@]host:port[/db], or
	// rediss:// for TLS. Exactly one of URL, Sentinel and Cluster is set for "redis".
	//
	// Security: the URL may carry a password; messages never quote it.
	URL string

	// SentinelMaster and SentinelAddrs reach Redis through Sentinel (key `sentinel`, a
	// mapping of `master`, the monitored master's name, and `addrs`, the sentinels'
	// host:port).
	SentinelMaster string
	SentinelAddrs  []string

	// ClusterAddrs are seed nodes of a Redis Cluster (key `cluster`, a mapping of `addrs`,
	// host:port each).
	ClusterAddrs []string

	// Username and Password authenticate to the data nodes with Sentinel or Cluster (keys
	// `username`, `password`); a URL carries its own. TLS turns on TLS there (key `tls`).
	Username string
	Password string
	TLS      bool

	// KeyPrefix begins every key the gateway writes (key `key_prefix`), so that several
	// gateways, or other programs, can share a Redis. 1 to 64 characters from A-Z a-z 0-9
	// _ - . : Defaults to "manifold".
	KeyPrefix string

	// DialTimeout, ReadTimeout and WriteTimeout bound connecting to Redis and each command
	// (keys `dial_timeout`, `read_timeout`, `write_timeout`, durations): a request that needs
	// Redis fails within them when it is gone. Greater than 0. Default 2s, 1s and 1s.
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration

	// PoolSize is the most connections to Redis (key `pool_size`); 0, the default, lets the
	// client choose (10 per CPU).
	PoolSize int

	// ReplicaLease is how long what a replica owns (its in-flight calls, the upstream
	// subscriptions it made for sessions) stays its own without renewal (key
	// `replica_lease`, a duration of at least 500ms): a replica renews it three times per
	// lease, and the others take over from one that stopped once it runs out. 0, the
	// default, is DefaultReplicaLease.
	ReplicaLease time.Duration
}

// DefaultReplicaLease is the replica lease when the config sets none.
const DefaultReplicaLease = 10 * time.Second

// minReplicaLease is the shortest replica lease accepted: a shorter one would be lost to a
// Redis round trip that took a little long.
const minReplicaLease = 500 * time.Millisecond

// sessionStore decodes the `session_store` mapping.
func sessionStore(s *SessionStore) decodeFunc {
	return func(d *decoder, n *yaml.Node, path string) bool {
		return d.mapping(n, path, "a mapping with `type:` memory or redis", []field{
			{key: "type", decode: str(&s.Type)},
			{key: "url", decode: str(&s.URL)},
			{key: "sentinel", decode: func(d *decoder, n *yaml.Node, path string) bool {
				return d.mapping(n, path, "a mapping with `master:` and `addrs:`", []field{
					{key: "master", decode: str(&s.SentinelMaster)},
					{key: "addrs", decode: strList(&s.SentinelAddrs)},
				})
			}},
			{key: "cluster", decode: func(d *decoder, n *yaml.Node, path string) bool {
				return d.mapping(n, path, "a mapping with `addrs:`", []field{
					{key: "addrs", decode: strList(&s.ClusterAddrs)},
				})
			}},
			{key: "username", decode: str(&s.Username)},
			{key: "password", decode: str(&s.Password)},
			{key: "tls", decode: boolean(&s.TLS)},
			{key: "key_prefix", decode: str(&s.KeyPrefix)},
			{key: "dial_timeout", decode: duration(&s.DialTimeout)},
			{key: "read_timeout", decode: duration(&s.ReadTimeout)},
			{key: "write_timeout", decode: duration(&s.WriteTimeout)},
			{key: "pool_size", decode: integer(&s.PoolSize)},
			{key: "replica_lease", decode: duration(&s.ReplicaLease)},
		})
	}
}

// applyStoreDefaults fills the session store settings the file leaves out.
func applyStoreDefaults(s *SessionStore, ix *index) {
	if !ix.has("session_store.type") {
		s.Type = StoreMemory
	}
	if !ix.has("session_store.key_prefix") {
		s.KeyPrefix = defaultStoreKeyPrefix
	}
	if !ix.has("session_store.dial_timeout") {
		s.DialTimeout = defaultStoreDialTimeout
	}
	if !ix.has("session_store.read_timeout") {
		s.ReadTimeout = defaultStoreReadTimeout
	}
	if !ix.has("session_store.write_timeout") {
		s.WriteTimeout = defaultStoreWriteTimeout
	}
}

// redisOnly are the session_store keys that belong to a Redis store.
var redisOnly = []string{"url", "sentinel", "cluster", "username", "password", "tls", "key_prefix", "dial_timeout", "read_timeout", "write_timeout", "pool_size", "replica_lease"}

// sessionStore checks the session store settings.
func (v *validator) sessionStore(s *SessionStore, w where) {
	const p = "session_store"
	switch s.Type {
	case StoreMemory:
		for _, key := range redisOnly {
			if w.ix.present(p + "." + key) {
				v.check(w, p+"."+key, "only with type: redis: set type: redis to keep sessions in Redis, or remove it")
			}
		}
		return
	case StoreRedis:
	default:
		v.check(w, p+".type", fmt.Sprintf("%s is not a session store: use memory (one replica) or redis (shared by replicas)", quote(s.Type)))
		return
	}
	set := 0
	for _, key := range []string{"url", "sentinel", "cluster"} {
		if w.ix.present(p + "." + key) {
			set++
		}
	}
	switch {
	case set == 0:
		v.check(w, p, "type redis needs where Redis is: url (like redis://127.0.0.1:6379/0), sentinel or cluster")
	case set > 1:
		v.check(w, p, "url, sentinel and cluster are alternatives: keep one")
	}
	if w.ix.present(p + ".url") {
		v.check(w, p+".url", checkRedisURL(s.URL))
		for _, key := range []string{"username", "password", "tls"} {
			if w.ix.present(p + "." + key) {
				v.check(w, p+"."+key, "with url, write it in the URL (rediss:// for TLS, user:password@ for ACL), or use sentinel or cluster")
			}
		}
	}
	if w.ix.present(p + ".sentinel") {
		if s.SentinelMaster == "" {
			v.check(w, p+".sentinel.master", "required: the name of the master the sentinels monitor, like mymaster")
		}
		v.addrs(w, p+".sentinel.addrs", s.SentinelAddrs, "sentinels")
	}
	if w.ix.present(p + ".cluster") {
		v.addrs(w, p+".cluster.addrs", s.ClusterAddrs, "cluster nodes")
	}
	if s.KeyPrefix == "" || len(s.KeyPrefix) > 64 || !onlyChars(s.KeyPrefix, "_-.:") {
		v.check(w, p+".key_prefix", fmt.Sprintf("%s is not a key prefix: use 1 to 64 characters from A-Z a-z 0-9 _ - . :", quote(s.KeyPrefix)))
	}
	for key, d := range map[string]time.Duration{"dial_timeout": s.DialTimeout, "read_timeout": s.ReadTimeout, "write_timeout": s.WriteTimeout} {
		if d <= 0 {
			v.check(w, p+"."+key, "must be greater than 0, like 1s: a request that needs Redis fails after it when Redis is gone")
		}
	}
	if s.PoolSize < 0 {
		v.check(w, p+".pool_size", "must be 0 (the client's default) or more")
	}
	if w.ix.present(p+".replica_lease") && s.ReplicaLease < minReplicaLease {
		v.check(w, p+".replica_lease", fmt.Sprintf("must be at least %s, like 10s: how long a replica that stopped keeps what it owned before the others take over", minReplicaLease))
	}
}

// addrs checks a list of host:port addresses of what.
func (v *validator) addrs(w where, path string, addrs []string, what string) {
	if len(addrs) == 0 {
		v.check(w, path, fmt.Sprintf("required: the %s' host:port, like [10.0.0.1:26379]", what))
	}
	for i, a := range addrs {
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			v.check(w, fmt.Sprintf("%s[%d]", path, i), fmt.Sprintf("%s is not host:port", quote(a)))
		}
	}
}

// checkRedisURL checks a Redis URL without quoting it: it may hold a password.
func checkRedisURL(s string) string {
	const want = "want redis://host:port[/db] or rediss:// for TLS, like redis://127.0.0.1:6379/0"
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return "not a valid URL: " + want + " (the value is not shown: it may hold a password)"
	case !strings.EqualFold(u.Scheme, "redis") && !strings.EqualFold(u.Scheme, "rediss"):
		return "not a Redis URL: " + want
	case u.Host == "":
		return "no host: " + want
	}
	return ""
}
