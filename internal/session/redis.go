package session

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// RedisOptions configures a RedisStore. Exactly one of URL, SentinelMaster (with
// SentinelAddrs) and ClusterAddrs names the server.
type RedisOptions struct {
	// URL names a single server: redis://[user:password@]host:port[/db], rediss://… for TLS,
	// or unix:///path. The user (an ACL user) and password are taken from it; the timeouts
	// and pool size below replace any given in its query.
	URL string

	// SentinelMaster and SentinelAddrs name a master watched by Redis Sentinel: its name
	// and the sentinels' host:port addresses. SentinelUsername and SentinelPassword
	// authenticate to the sentinels, when they require it.
	SentinelMaster   string
	SentinelAddrs    []string
	SentinelUsername string
	SentinelPassword string
	// DB is the database of the Sentinel form. If zero, database 0. (The URL form names its
	// database in the URL; a cluster has only database 0.)
	DB int

	// ClusterAddrs are host:port addresses of nodes of a Redis Cluster, to discover it from.
	ClusterAddrs []string

	// Username and Password authenticate to the servers of the Sentinel and Cluster forms
	// (Redis ACL; a password alone for requirepass). The URL form carries its own.
	Username string
	Password string
	// TLSConfig, if not nil, makes connections use TLS with it (with any form; rediss:// in
	// a URL alone uses TLS with the system's roots). The store does not modify it.
	TLSConfig *tls.Config

	// Client, if set, is the client the store uses (NewRedisClient makes one), so that other
	// state can share it, instead of one of its own to the server named above (which must
	// then be left empty); the store does not close it.
	Client redis.UniversalClient

	// Observe, if not nil, is told of each round trip to Redis of a client made for these
	// options (not of Client): how long it took, and whether it failed. It must be quick
	// and safe for concurrent use.
	Observe func(d time.Duration, failed bool)

	// KeyPrefix begins every key the store writes, so that stores (and other users of the
	// server) can share it. It must not contain '{' or '}'. If empty, "manifold".
	KeyPrefix string

	// DialTimeout, ReadTimeout and WriteTimeout bound connecting to a server, and waiting
	// for its answer or to send it a command. If zero, 2s, 1s and 1s. A store operation
	// fails, whatever its context, at the latest when their sum has passed: a request must
	// not hang on a Redis that has gone.
	DialTimeout  time.Duration
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// PoolSize is the number of connections kept per server. If zero, go-redis's default
	// (10 per GOMAXPROCS).
	PoolSize int

	// MaxSessions caps the live sessions of all stores that share the server and key
	// prefix (all replicas). If zero, there is no cap.
	MaxSessions int
	// MaxPerPrincipal caps the live sessions of each authenticated principal (those whose
	// Principal has the same Key), across all stores that share the server and key prefix.
	// If zero, there is no cap.
	MaxPerPrincipal int
	// MaxPerAnonymousAddr caps the live anonymous sessions of each client address (those
	// with the same ClientAddr), across all stores that share the server and key prefix.
	// Anonymous sessions without a ClientAddr are not counted. If zero, there is no cap.
	MaxPerAnonymousAddr int
	// IdleTimeout is how long a session lives unused: the ttl of its keys, put off by
	// Touch. Required (> 0).
	IdleTimeout time.Duration
	// EvictIdle lets Create make room when the stores sharing the server hold MaxSessions:
	// it evicts the session whose client made no request for longest (Touch; Keep does not
	// count), if it made none for at least EvictIdle, and announces it to the watchers of
	// every store on the server (WatchEnded). A request counts when its Touch reaches Redis,
	// which it does at most every EvictIdle/4 per session and store: so a session is evicted
	// only once it has been idle for between EvictIdle and EvictIdle × 5/4. If zero, a full
	// store refuses new sessions (ErrLimit). The replicas sharing a server should agree on it.
	EvictIdle time.Duration

	// Now returns the current time, for what does not decide expiry: the CreatedAt of new
	// sessions, task records' Created and Ended, when a session's client last made a
	// request (EvictIdle). Expiry runs on Redis's clock. If nil, time.Now is used.
	Now func() time.Time
	// Logger receives a line for each stored record the store cannot read. If nil, nothing
	// is logged.
	Logger *slog.Logger
	// Trace, when set, is called around each command and pipeline sent on a client that
	// NewRedisStore or NewRedisClient builds (not on Client), with the command's name, and
	// returns the context to send it under and the function to call with its outcome: the
	// gateway's traces (redistrace.go). It must not block.
	Trace RedisTrace
}

// Defaults of RedisOptions.
const (
	defaultRedisKeyPrefix    = "manifold"
	defaultRedisDialTimeout  = 2 * time.Second
	defaultRedisReadTimeout  = time.Second
	defaultRedisWriteTimeout = time.Second
)

// RedisStore is a Store in Redis, shared by the gateway's replicas: any replica serves any
// session. It is safe for concurrent use.
//
// Keys. Every key of a session is hash-tagged by the session's hash (the first 32 hex
// digits of the SHA-256 of its id), so that all of them live in one cluster slot:
//
//	<prefix>:{<hash>}:rec     the record (JSON)
//	<prefix>:{<hash>}:rev     reverse records by the gateway's request id (hash)
//	<prefix>:{<hash>}:tasks   task records by task id (hash)
//	<prefix>:{<hash>}:tdl     task ids by ttl deadline (sorted set)
//	<prefix>:{<hash>}:tend    ended tasks, in the order they make room (sorted set)
//	<prefix>:{<hash>}:idx     the session's global index keys and their values (hash)
//	<prefix>:{<hash>}:conns   the replicas that hold its own upstream connections (hash)
//	<prefix>:{<hash>}:owner   its owner set and ClientAddr (JSON, ownerWire), if it has either
//
// and global keys find records by what is not a session id:
//
//	<prefix>:sessions              session hashes by expiry (sorted set): the MaxSessions cap
//	<prefix>:active:{<prefix>:sessions}
//	                               session hashes by their client's last request, on the
//	                               stores' clock (sorted set): whom EvictIdle evicts first
//	<prefix>:owner:{<prefix>:sessions}:<sha256>
//	                               the session hashes of one principal or anonymous address
//	                               by expiry (sorted set): MaxPerPrincipal, MaxPerAnonymousAddr
//	<prefix>:revup:<hash>          reverse record by upstream and upstream request id
//	<prefix>:task:<hash>           task by task id
//	<prefix>:taskup:<hash>         task by upstream and upstream task id
//
// The owner sets are named by the SHA-256 of the principal or address, so that no key names
// a user, and are hash-tagged into the slot of <prefix>:sessions, so that one script admits
// a session under both caps at once (a cluster runs a script only on keys of one slot). A
// session counts against the principal or address it was created with (which Update must
// not change); Touch and Delete keep its member up whatever this store's caps, so that
// replicas whose caps differ keep one count.
//
// What the caps need of a session is kept beside its record, not in it, as its connections
// are: a replica of the previous build, during a rolling upgrade, reads the record and
// refuses any member it does not know (recordWire). Create writes the owner key in the
// round trip that writes the record, with the record's ttl; the scripts that put off or
// delete the session's keys (refresh, Delete) take it with them, as one of the session's
// keys (sessionKeys.all). Get reads it with the record, in the same script, and so learns
// the session's owner set for Touch and Delete, and the record's ClientAddr; a Touch or
// Delete of a session this store has not read reads the owner key alone first. A session
// written by the previous build has no owner key: it counts against no one, as that build
// admitted it to no owner set. A replica of the previous build puts off and deletes the
// record but not the owner key (it knows neither that nor the owner sets): the key then
// expires on its own ttl, when the session's member in its owner set does, and the session
// counts against no one from then on, as if that build had created it.
//
// A session id is a bearer secret: no key or value holds one, and none is sent to the
// server (MONITOR shows values too). Records name their session by its hash, and the store
// fills SessionID back in when it reads them: from the caller's argument where it names
// the session, else from the ids of the sessions this store created or read (Create, Get,
// Update, Touch), forgotten when a session is deleted or Expire finds it gone. A record of
// a session this replica never saw is returned with SessionID "" (and, if its upstream key
// names the session, Upstream ""): the gateway reads each session before it serves one of
// its requests, so this happens only for a session that no client of this replica uses.
//
// Expiry. Every key carries a ttl: the session's keys IdleTimeout after it was last used,
// the global index keys IdleTimeout after they were last refreshed, the index of live
// sessions and the owner sets IdleTimeout after a member was last added or put off. A
// member of these sets stands for its session until its Delete removes it, or until its
// score, its session's expiry as its Create or Touch set both, passes: a member left by a
// Delete that failed halfway, or by a replica of an earlier build, counts for at most
// IdleTimeout. Get reads the record and its ttl in one round trip and does not put it off;
// Touch puts off all of the session's ttls (and its score in the caps' indexes) only once
// less than half of IdleTimeout is left, as far as this store knows from its last Create,
// Get, Update or Touch, so that most Touches cost no round trip. Delete removes every key
// of the session at once, so that it is unknown to all replicas from then on. Records are
// never cached: each Get reads Redis.
//
// Stored values are JSON with a schema version; a record this build cannot read (a newer
// version, or garbage) is reported as ErrUndecodable, which wraps ErrNotFound.
//
// Every operation is bounded by the sum of the timeouts (4s by default), and go-redis does
// not retry: a Redis that does not answer is an error, not a wait.
type RedisStore struct {
	*redisConn
	// RedisRoutes keeps the sessions' routing tables and task records, beside their records.
	*RedisRoutes
	// sessionsKey is the index of live sessions (MaxSessions); activeKey, in its slot, the
	// sessions by their client's last request (EvictIdle).
	sessionsKey string
	activeKey   string
	// ownerKeyBase begins the names of the owner sets (ownerKey).
	ownerKeyBase string
}

// redisConn is what the Redis types of this package on one store share: the client, the
// options, and the sessions the store has seen, whose ids fill in the records, bus messages
// and ended sessions that name a session by its hash only.
type redisConn struct {
	opts   RedisOptions
	client redis.UniversalClient
	// ownsClient is set when the store made its client, which Close then closes.
	ownsClient bool
	logger     *slog.Logger
	// opTimeout bounds each operation: DialTimeout + ReadTimeout + WriteTimeout.
	opTimeout time.Duration

	mu sync.Mutex
	// known holds the sessions this store created or read, by hash: their ids, and when
	// their keys were last known to expire. Guarded by mu. Invariant: an entry goes when its
	// session is deleted here or Expire finds it gone, so that it holds at most the live
	// sessions seen here plus those that ended since the last Expire.
	known map[string]knownSession
}

// knownSession is a session this store has seen.
type knownSession struct {
	id string
	// expires is when its keys were last known to expire, on this process's monotonic
	// clock.
	expires time.Time
	// owner names the owner set the session counts in ("" for none), if ownerKnown: learnt
	// at Create, or from its owner key, read by Get or for a Touch or Delete (ownerSet).
	owner      string
	ownerKnown bool
	// marked is when this store last wrote a request of the session's client to the index
	// of activity (activeKey), on the store's clock (RedisOptions.Now); zero if never.
	marked time.Time
}

var _ Store = (*RedisStore)(nil)

// NewRedisStore returns a RedisStore configured by opts, which it copies. It does not
// connect: call Ping to learn whether the server answers. It fails if opts are incomplete
// or contradictory, naming every problem.
func NewRedisStore(opts *RedisOptions) (*RedisStore, error) {
	if opts == nil {
		return nil, errors.New("session store: redis: no options: a server and IdleTimeout are required")
	}
	o := opts.withDefaults()
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	client, err := newRedisClient(&o)
	if err != nil {
		return nil, fmt.Errorf("session store: redis: %w", err)
	}
	if o.Client == nil {
		client = observed(client, &o)
	}
	traced(client, o.Trace)
	conn := &redisConn{opts: o, client: client, ownsClient: o.Client == nil, logger: logger,
		opTimeout: o.DialTimeout + o.ReadTimeout + o.WriteTimeout, known: map[string]knownSession{}}
	return &RedisStore{
		redisConn:    conn,
		RedisRoutes:  &RedisRoutes{conn},
		sessionsKey:  o.KeyPrefix + ":sessions",
		activeKey:    o.KeyPrefix + ":active:{" + o.KeyPrefix + ":sessions}",
		ownerKeyBase: o.KeyPrefix + ":owner:{" + o.KeyPrefix + ":sessions}:",
	}, nil
}

// NewRedisClient returns a client of the server opts name, set up as a store's own would be
// (its timeouts, no retries), for the store (RedisOptions.Client) and other state to share.
// It does not connect. It fails as NewRedisStore does; its caller closes it.
func NewRedisClient(opts *RedisOptions) (redis.UniversalClient, error) {
	if opts == nil || opts.Client != nil {
		return nil, errors.New("session store: redis: NewRedisClient needs options that name a server, and no Client")
	}
	o := opts.withDefaults()
	client, err := newRedisClient(&o)
	if err != nil {
		return nil, fmt.Errorf("session store: redis: %w", err)
	}
	client = observed(client, &o)
	traced(client, o.Trace)
	return client, nil
}

// OpTimeout is the bound of one operation of a store with these options, defaults applied:
// DialTimeout + ReadTimeout + WriteTimeout.
func (o *RedisOptions) OpTimeout() time.Duration {
	d := o.withDefaults()
	return d.DialTimeout + d.ReadTimeout + d.WriteTimeout
}

// withDefaults returns a copy of o with the defaults of the fields left zero.
func (o *RedisOptions) withDefaults() RedisOptions {
	c := *o
	c.SentinelAddrs = append([]string(nil), o.SentinelAddrs...)
	c.ClusterAddrs = append([]string(nil), o.ClusterAddrs...)
	if c.KeyPrefix == "" {
		c.KeyPrefix = defaultRedisKeyPrefix
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = defaultRedisDialTimeout
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = defaultRedisReadTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = defaultRedisWriteTimeout
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// newRedisClient validates o, with defaults applied, and builds its client.
func newRedisClient(o *RedisOptions) (redis.UniversalClient, error) {
	url, err := checkRedisOptions(o)
	if err != nil {
		return nil, err
	}
	if o.Client != nil {
		return o.Client, nil
	}
	return buildRedisClient(o, url), nil
}

// checkRedisOptions returns every problem of o, with defaults applied, and the options its
// URL gives (nil without one).
func checkRedisOptions(o *RedisOptions) (*redis.Options, error) {
	var problems []error
	forms := 0
	for _, set := range []bool{o.URL != "", o.SentinelMaster != "" || len(o.SentinelAddrs) > 0, len(o.ClusterAddrs) > 0} {
		if set {
			forms++
		}
	}
	switch {
	case o.Client != nil && forms > 0:
		problems = append(problems, errors.New("a Client and a server: set Client, or URL, SentinelMaster and SentinelAddrs, or ClusterAddrs"))
	case o.Client != nil:
	case forms == 0:
		problems = append(problems, errors.New("no server: set URL, SentinelMaster and SentinelAddrs, or ClusterAddrs"))
	case forms > 1:
		problems = append(problems, errors.New("more than one server: set only one of URL, SentinelMaster and SentinelAddrs, or ClusterAddrs"))
	}
	if (o.SentinelMaster == "") != (len(o.SentinelAddrs) == 0) {
		problems = append(problems, errors.New("SentinelMaster and SentinelAddrs go together"))
	}
	if o.URL != "" && (o.Username != "" || o.Password != "") {
		problems = append(problems, errors.New("Username and Password are for the Sentinel and Cluster forms: put the credentials in the URL"))
	}
	if o.DB != 0 && o.SentinelMaster == "" {
		problems = append(problems, errors.New("DB is for the Sentinel form: put the database in the URL"))
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		problems = append(problems, fmt.Errorf("KeyPrefix %q contains '{' or '}', which would break the keys' hash tags", o.KeyPrefix))
	}
	if o.IdleTimeout <= 0 {
		problems = append(problems, fmt.Errorf("IdleTimeout is %v, must be positive", o.IdleTimeout))
	} else if o.IdleTimeout < 2*time.Millisecond {
		problems = append(problems, fmt.Errorf("IdleTimeout %v is below Redis's resolution", o.IdleTimeout))
	}
	for name, d := range map[string]time.Duration{"DialTimeout": o.DialTimeout, "ReadTimeout": o.ReadTimeout, "WriteTimeout": o.WriteTimeout} {
		if d < 0 {
			problems = append(problems, fmt.Errorf("%s is %v, must not be negative", name, d))
		}
	}
	if o.PoolSize < 0 {
		problems = append(problems, fmt.Errorf("PoolSize is %d, must not be negative", o.PoolSize))
	}
	if o.EvictIdle < 0 {
		problems = append(problems, fmt.Errorf("EvictIdle is %v, must not be negative", o.EvictIdle))
	}
	for name, n := range map[string]int{"MaxSessions": o.MaxSessions, "MaxPerPrincipal": o.MaxPerPrincipal, "MaxPerAnonymousAddr": o.MaxPerAnonymousAddr} {
		if n < 0 {
			problems = append(problems, fmt.Errorf("%s is %d, must not be negative", name, n))
		}
	}
	var url *redis.Options
	if o.URL != "" {
		var err error
		if url, err = redis.ParseURL(o.URL); err != nil {
			problems = append(problems, fmt.Errorf("URL: %w", err))
		}
	}
	if len(problems) > 0 {
		return nil, errors.Join(problems...)
	}
	return url, nil
}

// buildRedisClient builds the client of o's form: url (from o.URL), Sentinel or Cluster.
func buildRedisClient(o *RedisOptions, url *redis.Options) redis.UniversalClient {
	// Fail fast: no command retries (a retry could run a script twice), one dial per
	// attempt, and the context's deadline bounds every socket operation.
	const noRetries = -1
	disabled := &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	switch {
	case url != nil:
		url.DialTimeout, url.ReadTimeout, url.WriteTimeout = o.DialTimeout, o.ReadTimeout, o.WriteTimeout
		if o.PoolSize > 0 {
			url.PoolSize = o.PoolSize
		}
		if o.TLSConfig != nil {
			tc := o.TLSConfig.Clone()
			if tc.ServerName == "" {
				tc.ServerName, _, _ = net.SplitHostPort(url.Addr)
			}
			url.TLSConfig = tc
		}
		url.MaxRetries, url.DialerRetries, url.ContextTimeoutEnabled = noRetries, 1, true
		url.DisableIdentity = true
		url.MaintNotificationsConfig = disabled
		return redis.NewClient(url)
	case o.SentinelMaster != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            o.SentinelMaster,
			SentinelAddrs:         o.SentinelAddrs,
			SentinelUsername:      o.SentinelUsername,
			SentinelPassword:      o.SentinelPassword,
			Username:              o.Username,
			Password:              o.Password,
			DB:                    o.DB,
			TLSConfig:             cloneTLS(o.TLSConfig),
			DialTimeout:           o.DialTimeout,
			ReadTimeout:           o.ReadTimeout,
			WriteTimeout:          o.WriteTimeout,
			PoolSize:              o.PoolSize,
			MaxRetries:            noRetries,
			DialerRetries:         1,
			ContextTimeoutEnabled: true,
			DisableIdentity:       true,
		})
	default:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                    o.ClusterAddrs,
			Username:                 o.Username,
			Password:                 o.Password,
			TLSConfig:                cloneTLS(o.TLSConfig),
			DialTimeout:              o.DialTimeout,
			ReadTimeout:              o.ReadTimeout,
			WriteTimeout:             o.WriteTimeout,
			PoolSize:                 o.PoolSize,
			MaxRetries:               noRetries,
			DialerRetries:            1,
			ContextTimeoutEnabled:    true,
			DisableIdentity:          true,
			MaintNotificationsConfig: disabled,
		})
	}
}

func cloneTLS(c *tls.Config) *tls.Config {
	if c == nil {
		return nil
	}
	return c.Clone()
}

// Ping reports whether the server answers, within the store's timeouts: for a readiness
// check.
func (s *redisConn) Ping(ctx context.Context) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.client.Ping(ctx).Err(); err != nil {
		return opError(ctx, "ping", err)
	}
	return nil
}

// Close closes the store's connections. The sessions stay in Redis. Close may be called
// more than once; no other method may be called after it.
func (s *redisConn) Close() error {
	if !s.ownsClient {
		return nil
	}
	if err := s.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("session store: close: %w", err)
	}
	return nil
}

// opError is the error of operation op that failed with err: it names the store and the
// operation, and says so when the operation's context (the caller's, bounded by the store's
// timeouts) has ended, which go-redis reports as a mere i/o timeout.
func opError(ctx context.Context, op string, err error) error {
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(dl) {
		cerr = context.DeadlineExceeded // the connection's deadline, the context's, passed first
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("session store: %s: %w (%w)", op, err, cerr)
	}
	return fmt.Errorf("session store: %s: %w", op, err)
}

// bound derives the context of one operation: ctx, ending at the latest after the store's
// timeouts.
func (s *redisConn) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opTimeout)
}

// sessionKeys are the keys of one session.
type sessionKeys struct {
	hash                                          string
	rec, rev, tasks, tdl, tend, idx, conns, owner string
}

func (s *redisConn) keysOf(hash string) sessionKeys {
	base := s.opts.KeyPrefix + ":{" + hash + "}:"
	return sessionKeys{
		hash: hash,
		rec:  base + "rec", rev: base + "rev", tasks: base + "tasks",
		tdl: base + "tdl", tend: base + "tend", idx: base + "idx", conns: base + "conns",
		owner: base + "owner",
	}
}

// all lists every key of the session, the record first (the scripts know them by place):
// those that refresh puts off and Delete deletes.
func (k sessionKeys) all() []string {
	return []string{k.rec, k.rev, k.tasks, k.tdl, k.tend, k.idx, k.conns, k.owner}
}

// globalKey names a global index key from its name in a session's index hash.
func (s *redisConn) globalKey(name string) string { return s.opts.KeyPrefix + ":" + name }

// ttlMillis is IdleTimeout in the milliseconds Redis counts in.
func (s *redisConn) ttlMillis() int64 { return max(s.opts.IdleTimeout.Milliseconds(), 1) }

// ownerHash names rec's owner (ownerOf) by its SHA-256 in hex, "" if it has none: what its
// owner key stores (ownerWire).
func ownerHash(rec *Record) string {
	owner, _ := ownerOf(rec)
	if owner == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:])
}

// ownerSetKey names the owner set of the owner whose hash is hash (ownerHash), "" for none:
// in the slot of sessionsKey, named by a hash, so that the key holds nothing of the user's.
func (s *RedisStore) ownerSetKey(hash string) string {
	if hash == "" {
		return ""
	}
	return s.ownerKeyBase + hash
}

// ownerKey names the owner set of rec's owner, "" if it has none.
func (s *RedisStore) ownerKey(rec *Record) string { return s.ownerSetKey(ownerHash(rec)) }

// decodeOwnerKey reads the owner key (value) of session hash for operation op: an owner
// key that cannot be read is logged and counts for no one.
func (s *RedisStore) decodeOwnerKey(op, hash, value string) ownerWire {
	w, err := decodeOwner(value, hash)
	if err != nil {
		_ = s.undecodable(op, "owner", hash, err)
	}
	return w
}

// learn records that session id (of hash) exists and that its keys expire at expires.
func (s *redisConn) learn(hash, id string, expires time.Time) {
	s.learnOwner(hash, id, expires, "", false)
}

// learnOwner is learn and, if ownerKnown, that session hash counts in owner set owner ("" for
// none).
func (s *redisConn) learnOwner(hash, id string, expires time.Time, owner string, ownerKnown bool) {
	s.mu.Lock()
	e := s.known[hash]
	e.id, e.expires = id, expires
	if ownerKnown {
		e.owner, e.ownerKnown = owner, true
	}
	s.known[hash] = e
	s.mu.Unlock()
}

// ownerSet returns the owner set session hash counts in ("" for none), from what this store
// knows of it or else by reading its owner key (and its record's ttl) in one round trip:
// found is false if the record is gone. An owner key that cannot be read counts for no one.
func (s *RedisStore) ownerSet(ctx context.Context, op, hash, id string) (owner string, found bool, err error) {
	s.mu.Lock()
	e, ok := s.known[hash]
	s.mu.Unlock()
	if ok && e.ownerKnown {
		return e.owner, true, nil
	}
	k := s.keysOf(hash)
	start := time.Now()
	res, err := scriptOwner.Run(ctx, s.client, []string{k.rec, k.owner}).Slice()
	if err != nil {
		return "", false, err
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("unexpected answer of %d values", len(res))
	}
	left, _ := res[0].(int64)
	value, _ := res[1].(string)
	owner = s.ownerSetKey(s.decodeOwnerKey(op, hash, value).Owner)
	if left > 0 {
		s.learnOwner(hash, id, start.Add(time.Duration(left)*time.Millisecond), owner, true)
	}
	return owner, left != -2, nil
}

// forget drops session hash from the sessions this store knows.
func (s *redisConn) forget(hash string) {
	s.mu.Lock()
	delete(s.known, hash)
	s.mu.Unlock()
}

// idOf returns the id of session hash if this store knows it, else "".
func (s *redisConn) idOf(hash string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[hash].id
}

// undecodable logs that a stored record could not be read, naming the session by its
// fingerprint only, and returns err.
func (s *redisConn) undecodable(op, what, hash string, err error) error {
	s.logger.Warn("session store: a stored record cannot be read: it is treated as absent",
		"op", op, "record", what, "session", hash[:min(12, len(hash))], "error", err.Error())
	return err
}

// Create implements Store. It fails with ErrLimit when the sessions of all stores sharing
// the server and prefix number MaxSessions, with ErrOwnerLimit when those of the session's
// principal (or anonymous address) number MaxPerPrincipal (MaxPerAnonymousAddr). Both caps
// are checked and the session admitted to both in one script, so that replicas racing
// cannot pass a cap together.
func (s *RedisStore) Create(ctx context.Context, rec Record) (*Record, error) {
	rec.ID = NewID()
	if rec.CreatedAt.IsZero() {
		rec.CreatedAt = s.opts.Now()
	}
	hash := sessionHash(rec.ID)
	k := s.keysOf(hash)
	value, err := encodeRecord(&rec, hash)
	if err != nil {
		return nil, opError(ctx, "create", err)
	}
	// The session is admitted to its owner's set only when its kind has a cap here; its
	// owner key names the set in any case, so that replicas with the cap keep it up there.
	ownerH := ownerHash(&rec)
	owner := s.ownerSetKey(ownerH)
	ownerValue := encodeOwner(hash, ownerH, rec.ClientAddr)
	indexes := []string{s.sessionsKey, s.activeKey}
	_, ownerLimit := ownerCap(&rec, s.opts.MaxPerPrincipal, s.opts.MaxPerAnonymousAddr)
	if ownerLimit > 0 {
		indexes = append(indexes, owner)
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ttl := s.ttlMillis()
	start := time.Now()
	now := s.opts.Now()
	evictBefore := int64(0) // no eviction
	if s.opts.EvictIdle > 0 {
		evictBefore = now.Add(-s.opts.EvictIdle - s.markEvery()).UnixMilli()
	}
	// The record and its owner key are written beside its admission, in one round trip,
	// and removed again if a cap refuses it: its id was never handed out, so no one can have
	// read them.
	pipe := s.client.Pipeline()
	admit := scriptAdmit.Eval(ctx, pipe, indexes, hash, ttl, s.opts.MaxSessions, ownerLimit, now.UnixMilli(), evictBefore)
	pipe.Set(ctx, k.rec, value, time.Duration(ttl)*time.Millisecond)
	if ownerValue != "" {
		pipe.Set(ctx, k.owner, ownerValue, time.Duration(ttl)*time.Millisecond)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		s.bestEffort(ctx, func(p redis.Pipeliner) {
			p.Del(ctx, k.rec, k.owner)
			for _, key := range indexes {
				p.ZRem(ctx, key, hash)
			}
		})
		return nil, opError(ctx, "create", err)
	}
	res, _ := admit.Slice()
	status, victim := int64(0), ""
	if len(res) > 0 {
		status, _ = res[0].(int64)
	}
	if len(res) > 1 {
		victim, _ = res[1].(string)
	}
	switch status {
	case 1:
	case admitOwnerFull:
		s.bestEffort(ctx, func(p redis.Pipeliner) { p.Del(ctx, k.rec, k.owner) })
		return nil, ErrOwnerLimit
	default:
		s.bestEffort(ctx, func(p redis.Pipeliner) { p.Del(ctx, k.rec, k.owner) })
		return nil, ErrLimit
	}
	s.learnOwner(hash, rec.ID, start.Add(time.Duration(ttl)*time.Millisecond), owner, true)
	s.noteMarked(hash, now)
	if victim != "" {
		s.logger.Info("session store: evicted the session idle longest to make room for a new one",
			"session", victim[:min(12, len(victim))], "evict_idle", s.opts.EvictIdle.String())
		// The new session is in; the rest of the evicted one goes even if the caller has gone.
		dctx, cancel := s.bound(context.WithoutCancel(ctx))
		defer cancel()
		if err := s.dropEvicted(dctx, victim); err != nil {
			s.logger.Warn("session store: the keys of an evicted session stay until their ttl", "session", victim[:min(12, len(victim))], "error", err.Error())
		}
	}
	return &rec, nil
}

// markEvery is how often, at most, a store writes the requests of one session's client to
// the index of activity (Touch): a quarter of EvictIdle (of the idle timeout without one).
func (s *RedisStore) markEvery() time.Duration {
	if s.opts.EvictIdle > 0 {
		return s.opts.EvictIdle / 4
	}
	return s.opts.IdleTimeout / 4
}

// noteMarked records that this store wrote a request of session hash's client at at.
func (s *RedisStore) noteMarked(hash string, at time.Time) {
	s.mu.Lock()
	if e, ok := s.known[hash]; ok {
		e.marked = at
		s.known[hash] = e
	}
	s.mu.Unlock()
}

// dropEvicted deletes what is left of session hash, which Create has evicted from the
// indexes: its keys, its member of its owner's set, its global index keys; and announces its
// end on the channel of ended sessions, to every store's watchers, this one's too (so it is
// not forgotten here: WatchEnded or Expire reports it), so that whichever replica holds it
// live ends it.
func (s *RedisStore) dropEvicted(ctx context.Context, hash string) error {
	k := s.keysOf(hash)
	res, err := scriptOwner.Run(ctx, s.client, []string{k.rec, k.owner}).Slice()
	if err != nil {
		return opError(ctx, "evict", err)
	}
	value := ""
	if len(res) == 2 {
		value, _ = res[1].(string)
	}
	owner := s.ownerSetKey(s.decodeOwnerKey("evict", hash, value).Owner)
	pipe := s.client.Pipeline()
	idx := scriptDelete.Eval(ctx, pipe, k.all())
	if owner != "" {
		pipe.ZRem(ctx, owner, hash)
	}
	pipe.Publish(ctx, s.endedChannel(), hash)
	if _, err := pipe.Exec(ctx); err != nil {
		return opError(ctx, "evict", err)
	}
	entries, _ := idx.StringSlice()
	return s.deleteIndexEntries(ctx, entries, nil)
}

// bestEffort sends commands whose failure changes nothing for the caller (the cleanup of
// what has failed, or of what a ttl removes anyway).
func (s *RedisStore) bestEffort(ctx context.Context, build func(redis.Pipeliner)) {
	pipe := s.client.Pipeline()
	build(pipe)
	_, _ = pipe.Exec(ctx)
}

// Get implements Store. It reads the record and its ttl in one command (a script), so that
// Touch always knows how long the session has left in Redis, whoever renewed it last, or
// shortened it (a replica with a shorter idle timeout, a restore, a failover that lost a
// renewal). The same script reads what is kept beside the record: its connections, and its
// owner key, for the record's ClientAddr and for the owner set that Touch and Delete keep.
func (s *RedisStore) Get(ctx context.Context, id string) (*Record, error) {
	hash := sessionHash(id)
	start := time.Now()
	rec, left, owner, err := s.read(ctx, hash, id)
	if err != nil {
		return nil, err
	}
	if left > 0 {
		s.learnOwner(hash, id, start.Add(time.Duration(left)*time.Millisecond), owner, true)
	}
	return rec, nil
}

// read reads the record of session hash (whose id is id, "" when unknown here) with what is
// kept beside it (its connections, and its ClientAddr from its owner key), the ttl left in
// milliseconds, and the owner set it counts in ("" for none): one round trip.
func (s *RedisStore) read(ctx context.Context, hash, id string) (rec *Record, left int64, owner string, err error) {
	k := s.keysOf(hash)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	res, err := scriptGet.Run(ctx, s.client, []string{k.rec, k.conns, k.owner}).Slice()
	if errors.Is(err, redis.Nil) {
		return nil, 0, "", ErrNotFound
	}
	if err != nil {
		return nil, 0, "", opError(ctx, "get", err)
	}
	if len(res) < 3 || len(res)%2 != 1 {
		return nil, 0, "", opError(ctx, "get", fmt.Errorf("unexpected answer of %d values", len(res)))
	}
	value, _ := res[0].(string)
	left, _ = res[1].(int64)
	ownerValue, _ := res[2].(string)
	rec, err = decodeRecord(value, id, hash)
	if err != nil {
		return nil, 0, "", s.undecodable("get", "session", hash, err)
	}
	rec.Connections = connectionsOf(res[3:])
	o := s.decodeOwnerKey("get", hash, ownerValue)
	rec.ClientAddr = o.ClientAddr
	return rec, left, s.ownerSetKey(o.Owner), nil
}

// Touch implements Store. It costs a round trip only when less than half of the session's
// ttl is left, as far as this store knows, when this store has not written a request of the
// session's client to the index of activity for a quarter of EvictIdle (see markEvery), or
// when it does not know the session.
func (s *RedisStore) Touch(ctx context.Context, id string) error {
	hash := sessionHash(id)
	now := s.opts.Now()
	s.mu.Lock()
	e, ok := s.known[hash]
	s.mu.Unlock()
	mark := !ok || now.Sub(e.marked) >= s.markEvery()
	if ok && time.Until(e.expires) > s.opts.IdleTimeout/2 {
		if !mark {
			return nil
		}
		return s.markActive(ctx, hash, now)
	}
	return s.renew(ctx, id, hash, &now)
}

// Keep implements Store. It costs a round trip only when less than half of the session's ttl
// is left, as far as this store knows, or when it does not know the session.
func (s *RedisStore) Keep(ctx context.Context, id string) error {
	hash := sessionHash(id)
	s.mu.Lock()
	e, ok := s.known[hash]
	s.mu.Unlock()
	if ok && time.Until(e.expires) > s.opts.IdleTimeout/2 {
		return nil
	}
	return s.refresh(ctx, id, hash)
}

// markActive writes that session hash's client made a request at at to the index of
// activity: one round trip.
func (s *RedisStore) markActive(ctx context.Context, hash string, at time.Time) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := scriptMarkActive.Run(ctx, s.client, []string{s.sessionsKey, s.activeKey}, hash, at.UnixMilli(), s.ttlMillis()).Err(); err != nil {
		return opError(ctx, "touch", err)
	}
	s.noteMarked(hash, at)
	return nil
}

// refresh puts off the expiry of all of a session's keys to IdleTimeout from now: the
// session's own keys (its owner key with them) and its score in the index of live sessions
// and in its owner's set in one round trip, its global index keys, if it has any, in a
// second. (Of a session this store has not read, its owner key is read first, for its
// owner set.)
func (s *RedisStore) refresh(ctx context.Context, id, hash string) error {
	return s.renew(ctx, id, hash, nil)
}

// renew is refresh; with request not nil, its first round trip also writes a request of the
// session's client at that time to the index of activity (without, it only puts off that
// index's expiry).
func (s *RedisStore) renew(ctx context.Context, id, hash string, request *time.Time) error {
	k := s.keysOf(hash)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	owner, found, err := s.ownerSet(ctx, "touch", hash, id)
	if err != nil {
		return opError(ctx, "touch", err)
	}
	if !found {
		return nil // an unknown session is not an error
	}
	indexes := []string{s.sessionsKey}
	if owner != "" {
		indexes = append(indexes, owner)
	}
	ttl := s.ttlMillis()
	start := time.Now()
	pipe := s.client.Pipeline()
	keys := scriptRefresh.Eval(ctx, pipe, k.all(), ttl)
	scriptIndexTouch.Eval(ctx, pipe, indexes, hash, ttl)
	if request != nil {
		scriptMarkActive.Eval(ctx, pipe, []string{s.sessionsKey, s.activeKey}, hash, request.UnixMilli(), ttl)
	} else {
		pipe.PExpire(ctx, s.activeKey, time.Duration(ttl)*time.Millisecond)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return opError(ctx, "touch", err)
	}
	res, err := keys.Slice()
	if err != nil {
		return opError(ctx, "touch", err)
	}
	if n, _ := res[0].(int64); n != 1 {
		return nil // an unknown session is not an error
	}
	s.learn(hash, id, start.Add(time.Duration(ttl)*time.Millisecond))
	if request != nil {
		s.noteMarked(hash, *request)
	}
	if len(res) == 1 {
		return nil
	}
	pipe = s.client.Pipeline()
	for _, name := range res[1:] {
		if name, ok := name.(string); ok {
			pipe.PExpire(ctx, s.globalKey(name), time.Duration(ttl)*time.Millisecond)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return opError(ctx, "touch: index keys", err)
	}
	return nil
}

// maxUpdateTries bounds the attempts of an Update that races other Updates of the session.
const maxUpdateTries = 16

// Update implements Store. It reads the record, applies change, and stores the result if
// the record has not changed meanwhile (else it starts over); the record keeps its ttl.
// What is kept beside the record is not changed: the owner key (change sees the record's
// ClientAddr, which it must not change), and the connections (which change does not see).
func (s *RedisStore) Update(ctx context.Context, id string, change func(*Record)) (*Record, error) {
	hash := sessionHash(id)
	k := s.keysOf(hash)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	for range maxUpdateTries {
		// One command, of one slot: the record and its owner key share the session's tag.
		vals, err := s.client.MGet(ctx, k.rec, k.owner).Result()
		if err != nil {
			return nil, opError(ctx, "update", err)
		}
		if len(vals) != 2 {
			return nil, opError(ctx, "update", fmt.Errorf("unexpected answer of %d values", len(vals)))
		}
		old, ok := vals[0].(string)
		if !ok {
			return nil, ErrNotFound
		}
		rec, err := decodeRecord(old, id, hash)
		if err != nil {
			return nil, s.undecodable("update", "session", hash, err)
		}
		ownerValue, _ := vals[1].(string)
		rec.ClientAddr = s.decodeOwnerKey("update", hash, ownerValue).ClientAddr
		change(rec)
		rec.ID = id
		value, err := encodeRecord(rec, hash)
		if err != nil {
			return nil, opError(ctx, "update", err)
		}
		start := time.Now()
		res, err := scriptUpdate.Run(ctx, s.client, []string{k.rec}, old, value).Int64Slice()
		if err != nil {
			return nil, opError(ctx, "update", err)
		}
		if len(res) == 0 {
			return nil, errors.New("session store: update: an empty answer")
		}
		switch res[0] {
		case -1:
			return nil, ErrNotFound
		case 0:
			continue // changed meanwhile
		}
		if len(res) > 1 && res[1] > 0 {
			s.learn(hash, id, start.Add(time.Duration(res[1])*time.Millisecond))
		}
		return rec, nil
	}
	return nil, fmt.Errorf("session store: update: the record kept changing (%d tries)", maxUpdateTries)
}

// Delete implements Store. The session's keys go in one step (its owner key with them),
// with its members of the index of live sessions and of its owner's set, its global index
// keys in a second (they lead nowhere once the session's keys are gone). (Of a session this
// store has not read, its owner key is read first, for its owner set: whether or not its
// record is still there.)
func (s *RedisStore) Delete(ctx context.Context, id string) error {
	hash := sessionHash(id)
	k := s.keysOf(hash)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	owner, _, err := s.ownerSet(ctx, "delete", hash, id)
	if err != nil {
		return opError(ctx, "delete", err)
	}
	pipe := s.client.Pipeline()
	idx := scriptDelete.Eval(ctx, pipe, k.all())
	pipe.ZRem(ctx, s.sessionsKey, hash)
	pipe.ZRem(ctx, s.activeKey, hash)
	if owner != "" {
		pipe.ZRem(ctx, owner, hash)
	}
	// In the same round trip: the replicas that hold the session live end it now (WatchEnded).
	pipe.Publish(ctx, s.endedChannel(), hash)
	if _, err := pipe.Exec(ctx); err != nil {
		return opError(ctx, "delete", err)
	}
	// The session is gone everywhere: that is what Delete reports. Its global index keys lead
	// nowhere now and carry TTLs; failing to remove them is logged, not returned, so that the
	// caller ends the session's live part here.
	s.forget(hash)
	entries, _ := idx.StringSlice()
	if err := s.deleteIndexEntries(ctx, entries, nil); err != nil {
		s.logger.Warn("session store: the index keys of a deleted session stay until their TTL", "session", hash[:12], "error", err.Error())
	}
	return nil
}

// deleteIndexEntries deletes the global index keys of entries (name, value, ...) that
// still hold those values, except those in keep (name → value).
func (s *redisConn) deleteIndexEntries(ctx context.Context, entries []string, keep map[string]string) error {
	pipe := s.client.Pipeline()
	for i := 0; i+1 < len(entries); i += 2 {
		name, value := entries[i], entries[i+1]
		if v, ok := keep[name]; ok && v == value {
			continue
		}
		scriptDeleteIfEqual.Eval(ctx, pipe, []string{s.globalKey(name)}, value)
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("index keys: %w", err)
	}
	return nil
}

// expireBatch is how many sessions one pipeline of Expire asks about.
const expireBatch = 1000

// activePruneBatch is how many members of the index of activity one Expire looks at.
const activePruneBatch = 1000

// Expire implements Store. Redis ends idle sessions itself, by their ttl: cutoff is ignored.
// Expire reports the sessions this store knows (it created or read them) whose record has
// gone since, by expiry, by a Delete of another replica or by an eviction, each once, and
// forgets them; it also drops the expired members of the index of live sessions, and those of
// the index of activity whose session expired. (A Get that read a session
// just before it ended may make it known again, and so reported again.)
func (s *RedisStore) Expire(ctx context.Context, _ time.Time) ([]string, error) {
	s.mu.Lock()
	hashes := make([]string, 0, len(s.known))
	for h := range s.known {
		hashes = append(hashes, h)
	}
	s.mu.Unlock()

	ctx, cancel := s.bound(ctx)
	defer cancel()
	// All of them are asked about before any is forgotten, so that a failure loses none.
	var goneHashes []string
	for start := 0; start < len(hashes) || start == 0; start += expireBatch {
		batch := hashes[start:min(start+expireBatch, len(hashes))]
		pipe := s.client.Pipeline()
		if start == 0 {
			scriptIndexPrune.Eval(ctx, pipe, []string{s.sessionsKey})
			scriptActivePrune.Eval(ctx, pipe, []string{s.sessionsKey, s.activeKey}, s.opts.Now().Add(-s.opts.IdleTimeout).UnixMilli(), activePruneBatch)
		}
		exists := make([]*redis.IntCmd, len(batch))
		for i, h := range batch {
			exists[i] = pipe.Exists(ctx, s.keysOf(h).rec)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, opError(ctx, "expire", err)
		}
		for i, h := range batch {
			if exists[i].Val() == 0 {
				goneHashes = append(goneHashes, h)
			}
		}
	}
	var gone []string
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range goneHashes {
		if e, ok := s.known[h]; ok {
			delete(s.known, h)
			gone = append(gone, e.id)
		}
	}
	return gone, nil
}

// connectionsOf reads the connections scriptGet returns (field, value, ...); nil for none.
func connectionsOf(pairs []any) map[string]string {
	if len(pairs) == 0 {
		return nil
	}
	m := make(map[string]string, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		k, _ := pairs[i].(string)
		v, _ := pairs[i+1].(string)
		m[k] = v
	}
	return m
}

// SetConnection records that replica holds session id's own connection to upstream
// (isolation: session), beside the record and for as long as it lives: Get returns it in
// Record.Connections.
func (s *RedisStore) SetConnection(ctx context.Context, id, upstream, replica string) error {
	k := s.keysOf(sessionHash(id))
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := scriptSetConnection.Run(ctx, s.client, []string{k.rec, k.conns}, upstream, replica).Err(); err != nil {
		return opError(ctx, "set connection", err)
	}
	return nil
}

// ClearConnection forgets session id's connection to upstream if replica still holds it.
func (s *RedisStore) ClearConnection(ctx context.Context, id, upstream, replica string) error {
	k := s.keysOf(sessionHash(id))
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := scriptClearConnection.Run(ctx, s.client, []string{k.conns}, upstream, replica).Err(); err != nil {
		return opError(ctx, "clear connection", err)
	}
	return nil
}
