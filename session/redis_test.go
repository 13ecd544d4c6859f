package session

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/manifold-mcp/manifold/internal/testredis"
	"github.com/manifold-mcp/manifold/internal/testwait"
)

// These tests run against a real Redis server (redis_helpers_test.go); the behaviour the
// Store contract names is tested by the suite (store_test.go).

// commandLog is a go-redis hook that records the commands a client sends and the round
// trips they take.
type commandLog struct {
	mu    sync.Mutex
	trips int
	cmds  []string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add(cmd)
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		l.add(cmds...)
		return next(ctx, cmds)
	}
}

func (l *commandLog) add(cmds ...redis.Cmder) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trips++
	for _, c := range cmds {
		l.cmds = append(l.cmds, c.Name())
	}
}

// take returns the round trips and commands since the last take.
func (l *commandLog) take() (int, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	trips, cmds := l.trips, l.cmds
	l.trips, l.cmds = 0, nil
	return trips, cmds
}

func logCommands(s *RedisStore) *commandLog {
	l := &commandLog{}
	s.client.AddHook(l)
	return l
}

// pttl returns the ttl left of key, as a test's own client sees it.
func pttl(t *testing.T, c *redis.Client, key string) time.Duration {
	t.Helper()
	d, err := c.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRedisTouchRefreshesBelowHalf: Get costs one round trip and does not put expiry off;
// Touch costs none while more than half of the ttl is left, and once less is left it puts
// off the expiry of every key of the session, its global index keys and its entry in the
// index of live sessions.
func TestRedisTouchRefreshesBelowHalf(t *testing.T) {
	const idle = 1200 * time.Millisecond
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: idle})
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()
	rec, err := s.Create(ctx, Record{})
	if err != nil {
		t.Fatal(err)
	}
	_ = s.PutReverse(ctx, ReverseRecord{SessionID: rec.ID, ID: "1", Upstream: "u", UpstreamID: "1"})
	_ = s.PutTask(ctx, TaskRecord{ID: "t", SessionID: rec.ID, Upstream: "u", UpstreamID: "t"})
	_ = s.EndTask(ctx, "t")
	log := logCommands(s)
	k := s.keysOf(sessionHash(rec.ID))

	before := pttl(t, raw, k.rec)
	if _, err := s.Get(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if trips, cmds := log.take(); trips != 1 {
		t.Errorf("Get took %d round trips (%v), want 1", trips, cmds)
	}
	for range 3 {
		if err := s.Touch(ctx, rec.ID); err != nil {
			t.Fatal(err)
		}
	}
	if trips, cmds := log.take(); trips != 0 {
		t.Errorf("Touch right after Get sent %v, want nothing", cmds)
	}
	if after := pttl(t, raw, k.rec); after > before {
		t.Errorf("Get or an early Touch put expiry off: ttl %v, then %v", before, after)
	}

	// Once less than half is left (with a margin for the round trip), Touch refreshes.
	testwait.Until(t, 5*time.Second, "the ttl to fall below half", func() bool {
		return pttl(t, raw, k.rec) <= idle/2-100*time.Millisecond
	})
	if err := s.Touch(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if trips, cmds := log.take(); trips == 0 || trips > 2 {
		t.Errorf("Touch below half took %d round trips (%v), want 1 or 2", trips, cmds)
	}
	keys, err := scanKeys(t, s.opts.KeyPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 9 { // rec, rev, tasks, tend, idx, sessions, revup, task, taskup (no tdl: no task ttl)
		t.Errorf("keys: %v, want 9", keys)
	}
	for _, key := range keys {
		if left := pttl(t, raw, key); left < idle*3/4 {
			t.Errorf("after Touch, %s expires in %v, want about %v", key, left, idle)
		}
	}
	if err := s.Touch(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if trips, cmds := log.take(); trips != 0 {
		t.Errorf("Touch right after a refresh sent %v, want nothing", cmds)
	}
}

// TestRedisStoresNoSessionID: no key, no stored value and no command sent to Redis (as
// MONITOR shows them) holds a session id, whatever the operation.
func TestRedisStoresNoSessionID(t *testing.T) {
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute})
	other := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, KeyPrefix: s.opts.KeyPrefix})
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()

	lines := monitor(t, redisAddr(t))
	var ids []string
	for range 2 {
		rec, err := s.Create(ctx, Record{ProtocolVersion: "2025-11-25", ClientInfo: []byte(`{"name":"c"}`), Principal: Principal{Issuer: "i", Subject: "s"}, Subscriptions: []string{"file:///x"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	a, b := ids[0], ids[1]
	steps := []error{
		s.Touch(ctx, a),
		s.refresh(ctx, a, sessionHash(a)),
		s.PutReverse(ctx, ReverseRecord{SessionID: a, ID: `"r"`, Method: "sampling/createMessage", Upstream: "u\x00" + a, UpstreamID: "1"}),
		s.PutReverse(ctx, ReverseRecord{SessionID: b, ID: `"r"`, Upstream: "u", UpstreamID: "2"}),
		s.PutTask(ctx, TaskRecord{ID: "t1", SessionID: a, Upstream: "u\x00" + a, UpstreamID: "t1", TTL: time.Hour}),
		s.PutTask(ctx, TaskRecord{ID: "t2", SessionID: b, Upstream: "u", UpstreamID: "t2"}),
		s.EndTask(ctx, "t1"),
		s.refresh(ctx, a, sessionHash(a)),
	}
	_, err := s.Get(ctx, a)
	steps = append(steps, err)
	_, err = other.Get(ctx, a)
	steps = append(steps, err)
	_, err = s.Update(ctx, a, func(r *Record) { r.LogLevel = "debug" })
	steps = append(steps, err)
	_, err = s.ReverseByUpstream(ctx, "u\x00"+a, "1")
	steps = append(steps, err)
	_, err = s.Task(ctx, "t1")
	steps = append(steps, err)
	_, err = s.TaskByUpstream(ctx, "u\x00"+a, "t1")
	steps = append(steps, err)
	_, err = s.TasksOf(ctx, a)
	steps = append(steps, err)
	_, err = s.Expire(ctx, time.Now())
	steps = append(steps, err)
	if err := errors.Join(steps...); err != nil {
		t.Fatal(err)
	}

	// What is stored while both sessions live.
	dump := dumpKeys(t, raw, s.opts.KeyPrefix)
	if len(dump) < 10 {
		t.Errorf("only %d keys stored: %v", len(dump), dump)
	}
	for key, value := range dump {
		for _, id := range ids {
			if strings.Contains(key, id) || strings.Contains(value, id) {
				t.Errorf("key %q or its value %q holds a session id", key, value)
			}
		}
	}

	_, err = s.TakeReverse(ctx, a, `"r"`)
	steps = []error{err, s.Delete(ctx, a), other.Delete(ctx, b)}
	if err := errors.Join(steps...); err != nil {
		t.Fatal(err)
	}
	if left := dumpKeys(t, raw, s.opts.KeyPrefix); len(left) != 0 {
		t.Errorf("keys left after both sessions were deleted: %v", left)
	}
	sent := lines()
	if len(sent) < 20 {
		t.Fatalf("MONITOR saw only %d commands", len(sent))
	}
	for _, line := range sent {
		for _, id := range ids {
			if strings.Contains(line, id) {
				t.Errorf("a command sent to Redis holds a session id: %s", line)
			}
		}
	}
}

// monitor starts MONITOR on addr, on a connection of its own (go-redis's MonitorCmd shares
// a pooled connection), and returns a func that stops it and returns the lines it saw in
// between.
func monitor(t *testing.T, addr string) func() []string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		rd := bufio.NewReader(conn)
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				close(lines)
				return
			}
			lines <- strings.TrimRight(line, "\r\n")
		}
	}()
	echo := rawClient(addr)
	// wait reads lines until one shows marker m, sent (again) until MONITOR shows it.
	wait := func(m string) []string {
		var seen []string
		deadline := time.After(5 * time.Second)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		_ = echo.Echo(context.Background(), m).Err()
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatal("MONITOR ended")
				}
				if strings.Contains(line, m) {
					return seen
				}
				seen = append(seen, line)
			case <-tick.C:
				_ = echo.Echo(context.Background(), m).Err()
			case <-deadline:
				t.Fatalf("MONITOR did not show %s", m)
			}
		}
	}
	wait(fmt.Sprintf("monitor-begin-%d", time.Now().UnixNano()))
	return func() []string {
		seen := wait(fmt.Sprintf("monitor-end-%d", time.Now().UnixNano()))
		_ = echo.Close()
		_ = conn.Close()
		<-done
		return seen
	}
}

// dumpKeys returns every key under prefix with its value, whatever its type.
func dumpKeys(t *testing.T, c *redis.Client, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := scanKeys(t, prefix)
	if err != nil {
		t.Fatal(err)
	}
	dump := map[string]string{}
	for _, key := range keys {
		var v any
		switch typ := c.Type(ctx, key).Val(); typ {
		case "string":
			v, err = c.Get(ctx, key).Result()
		case "hash":
			v, err = c.HGetAll(ctx, key).Result()
		case "zset":
			v, err = c.ZRangeWithScores(ctx, key, 0, -1).Result()
		case "set":
			v, err = c.SMembers(ctx, key).Result()
		case "list":
			v, err = c.LRange(ctx, key, 0, -1).Result()
		case "none":
			continue // expired meanwhile
		default:
			t.Fatalf("key %s of type %s", key, typ)
		}
		if err != nil {
			t.Fatal(err)
		}
		dump[key] = fmt.Sprint(v)
	}
	return dump
}

// TestRedisUndecodableRecords: a stored value of an unknown schema version, or that is not
// a record, is ErrUndecodable (and ErrNotFound) with one log line that names the session by
// its fingerprint only; version 1 as this build writes it stays readable.
func TestRedisUndecodableRecords(t *testing.T) {
	var logs bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logs}, nil))
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, Logger: logger})
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()
	id := NewID()
	h := sessionHash(id)
	k := s.keysOf(h)
	set := func(value string) {
		t.Helper()
		if err := raw.Set(ctx, k.rec, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}

	// The version 1 wire form, as pinned here: a change that breaks it needs a new version.
	set(`{"v":1,"s":"` + h + `","protocolVersion":"2025-11-25","clientInfo":"{\"name\": \"c\"}","initialized":true,"logLevel":"info","principal":{"iss":"i","sub":"s"},"profile":"p","subscriptions":["x"],"createdAt":"2026-01-02T03:04:05.000000006Z"}`)
	got, err := s.Get(ctx, id)
	want := &Record{ID: id, ProtocolVersion: "2025-11-25", ClientInfo: []byte(`{"name": "c"}`), Initialized: true, LogLevel: "info",
		Principal: Principal{Issuer: "i", Subject: "s"}, Profile: "p", Subscriptions: []string{"x"}, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Get of a version 1 record = %+v, %v; want %+v", got, err, want)
	}

	other := sessionHash(NewID())
	for _, tc := range []struct{ name, value string }{
		{"newer version", `{"v":2,"s":"` + h + `","createdAt":"2026-01-01T00:00:00Z"}`},
		{"no version", `{"s":"` + h + `","createdAt":"2026-01-01T00:00:00Z"}`},
		{"version as a string", `{"v":"1","s":"` + h + `"}`},
		{"another session's record", `{"v":1,"s":"` + other + `","createdAt":"2026-01-01T00:00:00Z"}`},
		{"unknown field", `{"v":1,"s":"` + h + `","createdAt":"2026-01-01T00:00:00Z","admin":true}`},
		{"data after the record", `{"v":1,"s":"` + h + `","createdAt":"2026-01-01T00:00:00Z"}{}`},
		{"wrong type", `{"v":1,"s":"` + h + `","createdAt":5}`},
		{"not an object", `[1,2]`},
		{"not JSON", "\x00\xffgarbage"},
		{"empty", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set(tc.value)
			logMu.Lock()
			logs.Reset()
			logMu.Unlock()
			_, err := s.Get(ctx, id)
			if !errors.Is(err, ErrUndecodable) || !errors.Is(err, ErrNotFound) {
				t.Errorf("Get: %v, want ErrUndecodable and ErrNotFound", err)
			}
			logMu.Lock()
			line := logs.String()
			logMu.Unlock()
			if strings.Count(line, "\n") != 1 || !strings.Contains(line, "session="+h[:12]) || strings.Contains(line, id) {
				t.Errorf("log: %q, want one line naming the session by its fingerprint %s", line, h[:12])
			}
			_, err = s.Update(ctx, id, func(*Record) { t.Error("change called for an undecodable record") })
			if !errors.Is(err, ErrUndecodable) {
				t.Errorf("Update: %v, want ErrUndecodable", err)
			}
		})
	}

	// Task and reverse records, and index keys, too.
	set(`{"v":1,"s":"` + h + `","createdAt":"2026-01-01T00:00:00Z"}`)
	if err := s.PutTask(ctx, TaskRecord{ID: "good", SessionID: id, Upstream: "u", UpstreamID: "good"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutTask(ctx, TaskRecord{ID: "bad", SessionID: id, Upstream: "u", UpstreamID: "bad"}); err != nil {
		t.Fatal(err)
	}
	raw.HSet(ctx, k.tasks, "bad", `{"v":9}`)
	if _, err := s.Task(ctx, "bad"); !errors.Is(err, ErrUndecodable) {
		t.Errorf("Task of an undecodable record: %v, want ErrUndecodable", err)
	}
	if mine, err := s.TasksOf(ctx, id); err != nil || len(mine) != 1 || mine[0].ID != "good" {
		t.Errorf("TasksOf = %+v, %v; want the readable task only", mine, err)
	}
	_ = s.PutReverse(ctx, ReverseRecord{SessionID: id, ID: "1", Upstream: "u", UpstreamID: "1"})
	raw.Set(ctx, s.globalKey("revup:"+upstreamHash("u", "1")), "garbage", time.Minute)
	if _, err := s.ReverseByUpstream(ctx, "u", "1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReverseByUpstream through an undecodable index key: %v, want ErrNotFound", err)
	}
	raw.HSet(ctx, k.rev, "1", "[]")
	if _, err := s.TakeReverse(ctx, id, "1"); !errors.Is(err, ErrUndecodable) {
		t.Errorf("TakeReverse of an undecodable record: %v, want ErrUndecodable", err)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestRedisReplicasShareSessions: two stores on one Redis (two replicas) see one set of
// sessions: one reads what the other created, a Delete is seen by the other at once (and
// its Expire reports the session as ended), and the MaxSessions cap is global.
func TestRedisReplicasShareSessions(t *testing.T) {
	ctx := context.Background()
	r1 := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, MaxSessions: 3})
	r2 := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, MaxSessions: 3, KeyPrefix: r1.opts.KeyPrefix})

	a, err := r1.Create(ctx, Record{LogLevel: "info"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := r2.Get(ctx, a.ID); err != nil || got.LogLevel != "info" {
		t.Fatalf("the other replica's Get = %+v, %v", got, err)
	}
	if _, err := r2.Update(ctx, a.ID, func(r *Record) { r.LogLevel = "debug" }); err != nil {
		t.Fatal(err)
	}
	if got, err := r1.Get(ctx, a.ID); err != nil || got.LogLevel != "debug" {
		t.Errorf("an Update of the other replica: Get = %+v, %v; want debug", got, err)
	}
	_ = r1.PutTask(ctx, TaskRecord{ID: "t", SessionID: a.ID, Upstream: "u", UpstreamID: "t"})
	if got, err := r2.Task(ctx, "t"); err != nil || got.SessionID != a.ID {
		t.Errorf("the other replica's Task = %+v, %v; want it bound to the session", got, err)
	}
	if err := r1.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Get(ctx, a.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("the other replica still has a deleted session: %v", err)
	}
	if _, err := r2.Task(ctx, "t"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the other replica still has a deleted session's task: %v", err)
	}
	if gone, err := r2.Expire(ctx, time.Now()); err != nil || len(gone) != 1 || gone[0] != a.ID {
		t.Errorf("the other replica's Expire = %v, %v; want the deleted session, to drop what it holds of it", gone, err)
	}

	// The cap counts the sessions of both.
	var mine []string
	for _, s := range []*RedisStore{r1, r1, r2} {
		rec, err := s.Create(ctx, Record{})
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, rec.ID)
	}
	for i, s := range []*RedisStore{r1, r2} {
		if _, err := s.Create(ctx, Record{}); !errors.Is(err, ErrLimit) {
			t.Errorf("replica %d, 4th session: %v, want ErrLimit", i+1, err)
		}
	}
	_ = r2.Delete(ctx, mine[0])
	if _, err := r1.Create(ctx, Record{}); err != nil {
		t.Errorf("after a session of one replica was deleted by the other: %v", err)
	}
}

// TestRedisGone: a store whose Redis is gone fails each operation within a bound derived
// from its timeouts, with an error that is not ErrNotFound, honours its context, and works
// again once Redis is back.
func TestRedisGone(t *testing.T) {
	const timeout = 300 * time.Millisecond
	// The bound: the three timeouts, and slack for a loaded machine.
	bound := 3*timeout + time.Second
	ctx := context.Background()
	opts := RedisOptions{IdleTimeout: time.Minute, DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout}
	failsFast := func(t *testing.T, s *RedisStore, what string) {
		t.Helper()
		id := NewID()
		for name, op := range map[string]func() error{
			"Ping":   func() error { return s.Ping(ctx) },
			"Get":    func() error { _, err := s.Get(ctx, id); return err },
			"Create": func() error { _, err := s.Create(ctx, Record{}); return err },
			"Touch":  func() error { return s.Touch(ctx, id) },
			"Update": func() error { _, err := s.Update(ctx, id, func(*Record) {}); return err },
			"Delete": func() error { return s.Delete(ctx, id) },
			"Expire": func() error { _, err := s.Expire(ctx, time.Now()); return err },
			"PutTask": func() error {
				return s.PutTask(ctx, TaskRecord{ID: "t", SessionID: id, Upstream: "u", UpstreamID: "t"})
			},
			"ReverseByUpstream": func() error { _, err := s.ReverseByUpstream(ctx, "u", "1"); return err },
		} {
			began := time.Now()
			err := op()
			took := time.Since(began)
			if err == nil || errors.Is(err, ErrNotFound) || errors.Is(err, ErrLimit) {
				t.Errorf("%s with Redis %s: %v, want an error that says so", name, what, err)
			}
			if took > bound {
				t.Errorf("%s with Redis %s took %v, want at most %v", name, what, took, bound)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "session store: ") {
				t.Errorf("%s: error %q lacks the context", name, err)
			}
		}
	}

	t.Run("refused", func(t *testing.T) {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		checkGoroutines(t)
		o := opts
		o.URL, o.KeyPrefix = fmt.Sprintf("redis://127.0.0.1:%d", port), "mtest-none"
		s, err := NewRedisStore(&o)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		failsFast(t, s, "refusing connections")
	})

	t.Run("relay cut, stalled and restored", func(t *testing.T) {
		r := newRelay(t, redisAddr(t))
		o := opts
		o.URL = "redis://" + r.addr
		s := OpenTestRedisStore(t, o)
		rec, err := s.Create(ctx, Record{})
		if err != nil {
			t.Fatal(err)
		}

		r.stall(true)
		failsFast(t, s, "hanging")
		// The caller's context ends an operation earlier than the timeouts do.
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		began := time.Now()
		_, err = s.Get(short, rec.ID)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > timeout {
			t.Errorf("Get with a 50ms context on a hanging Redis: %v after %v", err, time.Since(began))
		}
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := s.Get(cancelled, rec.ID); !errors.Is(err, context.Canceled) {
			t.Errorf("Get with a cancelled context: %v", err)
		}

		r.stall(false)
		r.cut()
		failsFast(t, s, "gone")

		r.restore()
		testwait.Until(t, 5*time.Second, "Get to work again once Redis is back", func() bool {
			_, err := s.Get(ctx, rec.ID)
			return err == nil
		})
		if err := s.Touch(ctx, rec.ID); err != nil {
			t.Errorf("Touch after Redis came back: %v", err)
		}
	})
}

// TestRedisOptions: the three forms of server, TLS and ACL credentials are parsed into the
// client's options, and incomplete or contradictory options are refused, each problem
// named.
func TestRedisOptions(t *testing.T) {
	checkGoroutines(t)
	s, err := NewRedisStore(&RedisOptions{URL: "rediss://app:s3cret@redis.example:6380/2", IdleTimeout: time.Minute, PoolSize: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o := s.client.(*redis.Client).Options()
	if o.Addr != "redis.example:6380" || o.Username != "app" || o.Password != "s3cret" || o.DB != 2 || o.PoolSize != 7 {
		t.Errorf("URL parsed to addr %s user %s password %s db %d pool %d", o.Addr, o.Username, o.Password, o.DB, o.PoolSize)
	}
	if o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.example" {
		t.Errorf("rediss:// without TLS to the server's name: %+v", o.TLSConfig)
	}
	if o.DialTimeout != 2*time.Second || o.ReadTimeout != time.Second || o.WriteTimeout != time.Second || o.MaxRetries != 0 || !o.ContextTimeoutEnabled {
		t.Errorf("timeouts %v/%v/%v, %d retries, context timeouts %v; want 2s/1s/1s, none, on", o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.MaxRetries, o.ContextTimeoutEnabled)
	}
	if s.opts.KeyPrefix != "manifold" {
		t.Errorf("default KeyPrefix %q", s.opts.KeyPrefix)
	}

	// A TLS config of the caller's applies to a URL too, to the URL's host by default; the
	// caller's is not modified.
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS13}
	withTLS, err := NewRedisStore(&RedisOptions{URL: "redis://redis.example:6379", TLSConfig: tlsConf, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if c := withTLS.client.(*redis.Client).Options().TLSConfig; c == nil || c.ServerName != "redis.example" || c.MinVersion != tls.VersionTLS13 || tlsConf.ServerName != "" {
		t.Errorf("TLS config %+v, the caller's now %+v", c, tlsConf)
	}
	_ = withTLS.Close()

	sent, err := NewRedisStore(&RedisOptions{SentinelMaster: "mymaster", SentinelAddrs: []string{"a:26379", "b:26379"}, Username: "app", Password: "pw", DB: 1, TLSConfig: tlsConf, IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	_ = sent.Close()
	cl, err := NewRedisStore(&RedisOptions{ClusterAddrs: []string{"a:7000", "b:7001"}, Username: "app", Password: "pw", IdleTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	co := cl.client.(*redis.ClusterClient).Options()
	if len(co.Addrs) != 2 || co.Username != "app" || co.Password != "pw" {
		t.Errorf("cluster options %v %s %s", co.Addrs, co.Username, co.Password)
	}
	_ = cl.Close()

	for _, tc := range []struct {
		name string
		opts *RedisOptions
		want []string // each named in the error
	}{
		{"nil", nil, []string{"IdleTimeout"}},
		{"nothing", &RedisOptions{}, []string{"no server", "IdleTimeout"}},
		{"two servers", &RedisOptions{URL: "redis://x", ClusterAddrs: []string{"y:1"}, IdleTimeout: time.Minute}, []string{"more than one"}},
		{"sentinel without addresses", &RedisOptions{SentinelMaster: "m", IdleTimeout: time.Minute}, []string{"SentinelAddrs"}},
		{"credentials beside a URL", &RedisOptions{URL: "redis://x", Password: "pw", IdleTimeout: time.Minute}, []string{"in the URL"}},
		{"bad URL", &RedisOptions{URL: "http://x", IdleTimeout: time.Minute}, []string{"URL"}},
		{"hash tag in the prefix", &RedisOptions{URL: "redis://x", KeyPrefix: "a{b}", IdleTimeout: time.Minute}, []string{"KeyPrefix"}},
		{"all at once", &RedisOptions{URL: "redis://x", KeyPrefix: "{", IdleTimeout: -1, MaxSessions: -1, ReadTimeout: -1}, []string{"KeyPrefix", "IdleTimeout", "MaxSessions", "ReadTimeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewRedisStore(tc.opts)
			if err == nil {
				_ = s.Close()
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %s", err, w)
				}
			}
		})
	}
}

// TestRedisSentinel runs a store through Redis Sentinel: a redis-server and a sentinel
// watching it, started here.
func TestRedisSentinel(t *testing.T) {
	redisAddr(t)
	master := testredis.StartServer(t, "--save", "", "--appendonly", "no")
	host, mport, _ := strings.Cut(master, ":")
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, fmt.Appendf(nil, "sentinel monitor mymaster %s %s 1\n", host, mport), 0o600); err != nil {
		t.Fatal(err)
	}
	sentinel := testredis.StartServer(t, conf, "--sentinel")
	checkGoroutines(t)

	s, err := NewRedisStore(&RedisOptions{SentinelMaster: "mymaster", SentinelAddrs: []string{sentinel}, IdleTimeout: time.Minute, KeyPrefix: "mtest-sentinel"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping through the sentinel: %v", err)
	}
	rec, err := s.Create(ctx, Record{LogLevel: "info"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, rec.ID); err != nil || got.LogLevel != "info" {
		t.Errorf("Get = %+v, %v", got, err)
	}
	direct := rawClient(master)
	defer direct.Close()
	if n := direct.Exists(ctx, s.keysOf(sessionHash(rec.ID)).rec).Val(); n != 1 {
		t.Error("the record is not on the master the sentinel names")
	}
	if err := s.Delete(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
}

// TestRedisIndexKeysGo: no global index key outlives its record: taking a reverse record,
// a task that makes room and deleting the session remove theirs, and every key carries a
// ttl.
func TestRedisIndexKeysGo(t *testing.T) {
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute})
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()
	count := func(kind string) int {
		t.Helper()
		keys, err := scanKeys(t, s.opts.KeyPrefix+":"+kind)
		if err != nil {
			t.Fatal(err)
		}
		return len(keys)
	}
	rec, _ := s.Create(ctx, Record{})
	_ = s.PutReverse(ctx, ReverseRecord{SessionID: rec.ID, ID: "1", Upstream: "u", UpstreamID: "1"})
	if _, err := s.TakeReverse(ctx, rec.ID, "1"); err != nil {
		t.Fatal(err)
	}
	if n := count("revup"); n != 0 {
		t.Errorf("%d reverse index keys left after TakeReverse", n)
	}
	for i := range MaxTasksPerSession + 100 {
		id := fmt.Sprint(i)
		if err := s.PutTask(ctx, TaskRecord{ID: id, SessionID: rec.ID, Upstream: "u", UpstreamID: id, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		_ = s.EndTask(ctx, id)
	}
	if n, m := count("task"), count("taskup"); n != MaxTasksPerSession || m != MaxTasksPerSession {
		t.Errorf("%d task and %d taskup index keys for %d tasks", n, m, MaxTasksPerSession)
	}
	keys, _ := scanKeys(t, s.opts.KeyPrefix)
	for _, key := range keys {
		if d := pttl(t, raw, key); d <= 0 {
			t.Errorf("key %s has no ttl (%v)", key, d)
		}
	}
	if err := s.Delete(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if keys, _ := scanKeys(t, s.opts.KeyPrefix); len(keys) != 0 {
		t.Errorf("keys left after Delete: %v", keys)
	}
}
