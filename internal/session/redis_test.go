package session

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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
	if len(keys) != 10 { // rec, rev, tasks, tend, idx, sessions, active, revup, task, taskup (no tdl: no task ttl)
		t.Errorf("keys: %v, want 10", keys)
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
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, MaxPerPrincipal: 5})
	other := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, KeyPrefix: s.opts.KeyPrefix, MaxPerPrincipal: 5})
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()

	lines := monitor(t, redisAddr(t))
	var ids []string
	for range 2 {
		rec, err := s.Create(ctx, Record{ProtocolVersion: "2025-11-25", ClientInfo: []byte(`{"name":"c"}`), Principal: Principal{Issuer: "i", Subject: "s"}, ClientAddr: "192.0.2.1", Subscriptions: []string{"file:///x"}})
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

// monitor is testredis.Monitor.
func monitor(t *testing.T, addr string) func() []string { return testredis.Monitor(t, addr) }

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
	// It is the previous release's too, which reads the records of this one during a rolling
	// upgrade (TestRedisRecordsReadByPreviousBuild): nothing may be added to it.
	set(`{"v":1,"s":"` + h + `","protocolVersion":"2025-11-25","clientInfo":"{\"name\": \"c\"}","initialized":true,"logLevel":"info","principal":{"iss":"i","sub":"s"},"profile":"p","subscriptions":["x"],"createdAt":"2026-01-02T03:04:05.000000006Z"}`)
	got, err := s.Get(ctx, id)
	want := &Record{ID: id, ProtocolVersion: "2025-11-25", ClientInfo: []byte(`{"name": "c"}`), Initialized: true, LogLevel: "info",
		Principal: Principal{Issuer: "i", Subject: "s"}, Profile: "p", Subscriptions: []string{"x"}, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Get of a version 1 record = %+v, %v; want %+v", got, err, want)
	}
	// Its owner key, version 1, beside it: the owner set by its hash, and the ClientAddr.
	owner := ownerHash(want)
	if err := raw.Set(ctx, k.owner, `{"v":1,"s":"`+h+`","owner":"`+owner+`","clientAddr":"192.0.2.1"}`, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got, err = s.Get(ctx, id)
	want.ClientAddr = "192.0.2.1"
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Get of a version 1 record with its owner key = %+v, %v; want %+v", got, err, want)
	}
	if o, _, err := s.ownerSet(ctx, "test", h, id); err != nil || o != s.ownerKey(want) {
		t.Errorf("owner set of the session = %q, %v; want %q", o, err, s.ownerKey(want))
	}
	// A later build may add members to the owner key within version 1: they are ignored. An
	// owner key that cannot be read loses the session's owner and address, not its record.
	for _, tc := range []struct{ name, value, addr string }{
		{"unknown member", `{"v":1,"s":"` + h + `","owner":"` + owner + `","clientAddr":"192.0.2.9","later":[1]}`, "192.0.2.9"},
		{"newer version", `{"v":2,"s":"` + h + `","owner":"` + owner + `"}`, ""},
		{"another session's", `{"v":1,"s":"` + sessionHash(NewID()) + `","owner":"` + owner + `"}`, ""},
		{"bad owner hash", `{"v":1,"s":"` + h + `","owner":"` + strings.ToUpper(owner) + `"}`, ""},
		{"not JSON", "garbage", ""},
	} {
		t.Run("owner key: "+tc.name, func(t *testing.T) {
			if err := raw.Set(ctx, k.owner, tc.value, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			logMu.Lock()
			logs.Reset()
			logMu.Unlock()
			fresh := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, KeyPrefix: s.opts.KeyPrefix, Logger: logger})
			got, err := fresh.Get(ctx, id)
			if err != nil || got.ClientAddr != tc.addr || got.LogLevel != "info" {
				t.Errorf("Get = %+v, %v; want the record with ClientAddr %q", got, err, tc.addr)
			}
			logMu.Lock()
			line := logs.String()
			logMu.Unlock()
			switch {
			case tc.addr != "" && line != "":
				t.Errorf("log: %q, want nothing", line)
			case tc.addr == "" && (strings.Count(line, "\n") != 1 || !strings.Contains(line, "record=owner") || !strings.Contains(line, "session="+h[:12])):
				t.Errorf("log: %q, want one line on the owner key of session %s", line, h[:12])
			}
		})
	}
	raw.Del(ctx, k.owner)

	other := sessionHash(NewID())
	for _, tc := range []struct{ name, value string }{
		{"newer version", `{"v":2,"s":"` + h + `","createdAt":"2026-01-01T00:00:00Z"}`},
		{"no version", `{"s":"` + h + `","createdAt":"2026-01-01T00:00:00Z"}`},
		{"version as a string", `{"v":"1","s":"` + h + `"}`},
		{"another session's record", `{"v":1,"s":"` + other + `","createdAt":"2026-01-01T00:00:00Z"}`},
		{"unknown field", `{"v":1,"s":"` + h + `","createdAt":"2026-01-01T00:00:00Z","admin":true}`},
		{"clientAddr, which is kept beside the record", `{"v":1,"s":"` + h + `","clientAddr":"192.0.2.1","createdAt":"2026-01-01T00:00:00Z"}`},
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
		{"all at once", &RedisOptions{URL: "redis://x", KeyPrefix: "{", IdleTimeout: -1, MaxSessions: -1, MaxPerPrincipal: -1, MaxPerAnonymousAddr: -1, ReadTimeout: -1},
			[]string{"KeyPrefix", "IdleTimeout", "MaxSessions", "MaxPerPrincipal", "MaxPerAnonymousAddr", "ReadTimeout"}},
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

// TestRedisOwnerLimitAcrossReplicas: MaxPerPrincipal holds across replicas: of 20 Creates
// of one principal that race each other on two stores sharing one Redis, exactly the cap
// pass; a session deleted by the replica that did not create it (nor read it) makes room.
func TestRedisOwnerLimitAcrossReplicas(t *testing.T) {
	const limit, tries = 3, 20
	ctx := context.Background()
	r1 := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, MaxPerPrincipal: limit, MaxPerAnonymousAddr: limit})
	r2 := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, MaxPerPrincipal: limit, MaxPerAnonymousAddr: limit, KeyPrefix: r1.opts.KeyPrefix})
	replicas := []*RedisStore{r1, r2}
	alice := Principal{Issuer: "https://issuer.example", Subject: "alice"}

	for _, rec := range []Record{{Principal: alice}, {ClientAddr: "192.0.2.1"}} {
		var mu sync.Mutex
		var created []string
		refused := 0
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range tries {
			wg.Go(func() {
				<-ready
				got, err := replicas[i%2].Create(ctx, rec)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created = append(created, got.ID)
				case errors.Is(err, ErrOwnerLimit):
					refused++
				default:
					t.Errorf("Create on replica %d: %v", i%2+1, err)
				}
			})
		}
		close(ready)
		wg.Wait()
		if len(created) != limit || refused != tries-limit {
			t.Fatalf("%d racing Creates of %s %s on two replicas: %d created, %d refused; want %d and %d",
				tries, rec.Principal, rec.ClientAddr, len(created), refused, limit, tries-limit)
		}

		// Each replica deletes a session it may not know: it reads its owner key first.
		for _, r := range replicas {
			if err := r.Delete(ctx, created[0]); err != nil {
				t.Fatal(err)
			}
		}
		fresh := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, KeyPrefix: r1.opts.KeyPrefix})
		if err := fresh.Delete(ctx, created[1]); err != nil {
			t.Fatal(err)
		}
		for i, r := range replicas {
			if _, err := r.Create(ctx, rec); err != nil {
				t.Errorf("replica %d: a session after two were deleted: %v", i+1, err)
			}
		}
		if _, err := r1.Create(ctx, rec); !errors.Is(err, ErrOwnerLimit) {
			t.Errorf("full again: %v, want ErrOwnerLimit", err)
		}
	}
}

// TestRedisOwnerSets: an owner set is named by a hash only, in the slot of the index of live
// sessions; it lives as long as its sessions: it takes their ttl, a Touch that puts off a
// session's expiry puts off its member's and the set's (on a replica that never read the
// session too, and whatever that replica's caps), and it goes when its sessions are deleted.
func TestRedisOwnerSets(t *testing.T) {
	const idle = 1200 * time.Millisecond
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: idle, MaxPerPrincipal: 2, MaxPerAnonymousAddr: 2})
	other := OpenTestRedisStore(t, RedisOptions{IdleTimeout: idle, KeyPrefix: s.opts.KeyPrefix})
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()
	alice := Principal{Issuer: "https://issuer.example", Subject: "alice"}
	const addr = "192.0.2.1"
	a, err := s.Create(ctx, Record{Principal: alice, ClientAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, Record{ClientAddr: addr})
	if err != nil {
		t.Fatal(err)
	}
	ownerA, ownerB := s.ownerKey(&Record{Principal: alice}), s.ownerKey(&Record{ClientAddr: addr})
	for _, id := range []string{a.ID, b.ID} {
		k := s.keysOf(sessionHash(id))
		if rec, owner := pttl(t, raw, k.rec), pttl(t, raw, k.owner); owner < rec-50*time.Millisecond || owner > rec+50*time.Millisecond {
			t.Errorf("after Create, the owner key expires in %v, the record in %v", owner, rec)
		}
	}

	keys, err := scanKeys(t, s.opts.KeyPrefix+":owner")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ownerA, ownerB}
	slices.Sort(keys)
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Fatalf("owner sets %v, want %v", keys, want)
	}
	for _, key := range keys {
		for _, secret := range []string{"alice", "issuer", addr} {
			if strings.Contains(key, secret) {
				t.Errorf("owner set %s names %q", key, secret)
			}
		}
		if tag := hashTag(key); tag != s.sessionsKey {
			t.Errorf("owner set %s is in the slot of %q, want that of the index %s", key, tag, s.sessionsKey)
		}
		if d := pttl(t, raw, key); d < idle*3/4 || d > idle {
			t.Errorf("owner set %s expires in %v, want about %v", key, d, idle)
		}
	}
	// left is how long the member of session id has in owner set key, by Redis's clock.
	left := func(key, id string) time.Duration {
		t.Helper()
		score, err := raw.ZScore(ctx, key, sessionHash(id)).Result()
		if err != nil {
			t.Fatalf("the member of a session in %s: %v", key, err)
		}
		now, err := raw.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		return time.Duration(int64(score)-now.UnixMilli()) * time.Millisecond
	}

	testwait.Until(t, 5*time.Second, "the ttls to fall below half", func() bool {
		return pttl(t, raw, ownerA) <= idle/2-100*time.Millisecond
	})
	if err := other.Touch(ctx, a.ID); err != nil { // other never read a
		t.Fatal(err)
	}
	if err := s.Touch(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key, id string
	}{{ownerA, a.ID}, {ownerB, b.ID}} {
		if d := pttl(t, raw, c.key); d < idle*3/4 {
			t.Errorf("after Touch, owner set %s expires in %v, want about %v", c.key, d, idle)
		}
		if d := left(c.key, c.id); d < idle*3/4 || d > idle {
			t.Errorf("after Touch, the session's member expires in %v, want about %v", d, idle)
		}
		k := s.keysOf(sessionHash(c.id))
		if rec := pttl(t, raw, k.rec); rec < left(c.key, c.id)-50*time.Millisecond {
			t.Errorf("after Touch, the record expires in %v, before its member (%v)", rec, left(c.key, c.id))
		}
		// The key beside the record that names the owner set lives as long as the record.
		if rec, owner := pttl(t, raw, k.rec), pttl(t, raw, k.owner); owner < rec-50*time.Millisecond || owner > rec+50*time.Millisecond {
			t.Errorf("after Touch, the owner key expires in %v, the record in %v", owner, rec)
		}
	}

	// Deleted by a replica that never read it, and by the one that created it.
	if err := other.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if keys, _ := scanKeys(t, s.opts.KeyPrefix); len(keys) != 0 {
		t.Errorf("keys left after the sessions were deleted: %v", keys)
	}
}

// hashTag returns what Redis Cluster hashes of key for its slot: its hash tag, if it has
// one, else all of it.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// TestRedisClusterOwnerLimits runs a store with every cap on a Redis Cluster (one node that
// serves every slot, started here), which refuses a command or script whose keys are not
// in one slot: the scripts that admit and touch a session in the index of live sessions
// and its owner's set, those that read its owner key beside its record, and Delete.
func TestRedisClusterOwnerLimits(t *testing.T) {
	redisAddr(t)
	addr := testredis.StartServer(t, "--save", "", "--appendonly", "no",
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(t.TempDir(), "nodes.conf"))
	ctx := context.Background()
	raw := rawClient(addr)
	defer raw.Close()
	slots := make([]any, 0, 16386)
	slots = append(slots, "CLUSTER", "ADDSLOTS")
	for i := range 16384 {
		slots = append(slots, i)
	}
	if err := raw.Do(ctx, slots...).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "the cluster to be up", func() bool {
		return strings.Contains(raw.ClusterInfo(ctx).Val(), "cluster_state:ok")
	})
	checkGoroutines(t)
	s, err := NewRedisStore(&RedisOptions{ClusterAddrs: []string{addr}, IdleTimeout: time.Minute,
		MaxSessions: 10, MaxPerPrincipal: 1, MaxPerAnonymousAddr: 1, KeyPrefix: "mtest-cluster"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	other, err := NewRedisStore(&RedisOptions{ClusterAddrs: []string{addr}, IdleTimeout: time.Minute, KeyPrefix: "mtest-cluster"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	alice := Principal{Issuer: "https://issuer.example", Subject: "alice"}
	for _, rec := range []Record{{Principal: alice}, {ClientAddr: "192.0.2.1"}} {
		a, err := s.Create(ctx, rec)
		if err != nil {
			t.Fatalf("Create on a cluster: %v", err)
		}
		if _, err := s.Create(ctx, rec); !errors.Is(err, ErrOwnerLimit) {
			t.Errorf("a second session: %v, want ErrOwnerLimit", err)
		}
		steps := []error{s.refresh(ctx, a.ID, sessionHash(a.ID)), other.refresh(ctx, a.ID, sessionHash(a.ID))}
		_, err = s.Update(ctx, a.ID, func(r *Record) { r.LogLevel = "debug" })
		steps = append(steps, err)
		if got, err := s.Get(ctx, a.ID); err != nil || got.ClientAddr != rec.ClientAddr {
			t.Errorf("Get on a cluster = %+v, %v; want ClientAddr %q", got, err, rec.ClientAddr)
		}
		_, err = s.Expire(ctx, time.Now())
		steps = append(steps, err, other.Delete(ctx, a.ID))
		if err := errors.Join(steps...); err != nil {
			t.Fatalf("on a cluster: %v", err)
		}
		if _, err := s.Create(ctx, rec); err != nil {
			t.Errorf("a session after the first was deleted: %v", err)
		}
	}
}

// prevRecordWire and prevPrincipal are recordWire and Principal as the previous release
// declared them: the build that reads the records of this one during a rolling upgrade,
// with decodeWire, which refuses a member it does not know (in the principal too). They are
// copied here, not derived from this build's, so that a member added to the record fails
// TestRedisRecordsReadByPreviousBuild.
type prevRecordWire struct {
	V                  int           `json:"v"`
	Session            string        `json:"s"`
	ProtocolVersion    string        `json:"protocolVersion,omitempty"`
	ClientInfo         string        `json:"clientInfo,omitempty"`
	ClientCapabilities string        `json:"clientCapabilities,omitempty"`
	Initialized        bool          `json:"initialized,omitempty"`
	LogLevel           string        `json:"logLevel,omitempty"`
	Principal          prevPrincipal `json:"principal,omitzero"`
	Profile            string        `json:"profile,omitempty"`
	Subscriptions      []string      `json:"subscriptions,omitempty"`
	CreatedAt          time.Time     `json:"createdAt"`
}

type prevPrincipal struct {
	Issuer  string `json:"iss,omitempty"`
	Subject string `json:"sub,omitempty"`
}

// TestRedisRecordsReadByPreviousBuild: a replica of the previous release reads every record
// this build writes (the promise of rolling upgrades): what the per-owner caps need, the
// ClientAddr and the owner set, is kept beside the record, not in it, through Create,
// SetConnection and Update. This build returns the ClientAddr from there, and reads a
// session the previous build wrote (no owner key), which counts against no one.
func TestRedisRecordsReadByPreviousBuild(t *testing.T) {
	s := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, MaxPerPrincipal: 1, MaxPerAnonymousAddr: 1})
	other := OpenTestRedisStore(t, RedisOptions{IdleTimeout: time.Minute, KeyPrefix: s.opts.KeyPrefix})
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()
	alice := Principal{Issuer: "https://issuer.example", Subject: "alice"}
	const addr = "192.0.2.1"

	// A principal of issuer and subject only is stored as the previous build stored it.
	if b, err := json.Marshal(Principal{Issuer: "i", Subject: "s"}); err != nil || string(b) != `{"iss":"i","sub":"s"}` {
		t.Errorf("a principal is stored as %s, %v; want {\"iss\":\"i\",\"sub\":\"s\"}", b, err)
	}

	// readPrev reads the stored record of id as the previous build does.
	readPrev := func(what, id string) string {
		t.Helper()
		h := sessionHash(id)
		value, err := raw.Get(ctx, s.keysOf(h).rec).Result()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var w prevRecordWire
		if err := decodeWire(value, &w, h, &w.V, &w.Session); err != nil {
			t.Errorf("%s: the previous build cannot read the record %s: %v", what, value, err)
		}
		if strings.Contains(value, "clientAddr") || strings.Contains(value, addr) {
			t.Errorf("%s: the record %s holds the client address", what, value)
		}
		return value
	}

	for _, in := range []Record{
		{Principal: alice, ClientAddr: addr, ProtocolVersion: "2025-11-25", ClientInfo: json.RawMessage(`{"name":"c"}`),
			ClientCapabilities: json.RawMessage(`{}`), Profile: "ops", Subscriptions: []string{"file:///a"}},
		{ClientAddr: addr},
	} {
		rec, err := s.Create(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		what := in.Principal.String() + " " + in.ClientAddr
		if value := readPrev(what+": created", rec.ID); !in.Principal.Anonymous() && !strings.Contains(value, `"principal":{"iss":"https://issuer.example","sub":"alice"}`) {
			t.Errorf("%s: the record %s does not hold the principal as the previous build did", what, value)
		}
		if _, err := s.Create(ctx, in); !errors.Is(err, ErrOwnerLimit) {
			t.Errorf("%s: a second session: %v, want ErrOwnerLimit", what, err)
		}
		if err := s.SetConnection(ctx, rec.ID, "u", "replica-1"); err != nil {
			t.Fatal(err)
		}
		up, err := other.Update(ctx, rec.ID, func(r *Record) {
			if r.ClientAddr != addr {
				t.Errorf("%s: Update's change sees ClientAddr %q, want %q", what, r.ClientAddr, addr)
			}
			r.LogLevel, r.Initialized = "debug", true
		})
		if err != nil || up.ClientAddr != addr {
			t.Fatalf("%s: Update = %+v, %v; want ClientAddr %q", what, up, err, addr)
		}
		readPrev(what+": updated", rec.ID)
		got, err := other.Get(ctx, rec.ID)
		if err != nil || got.ClientAddr != addr || got.LogLevel != "debug" || got.Connections["u"] != "replica-1" {
			t.Errorf("%s: Get = %+v, %v; want ClientAddr %q, LogLevel debug and the connection", what, got, err, addr)
		}
	}

	// A session of the previous build: no owner key. Its principal's cap does not count it
	// (the previous build admitted it to no owner set); it is touched and deleted as any.
	id := NewID()
	h := sessionHash(id)
	old := `{"v":1,"s":"` + h + `","principal":{"iss":"https://issuer.example","sub":"bob"},"createdAt":"2026-01-02T03:04:05Z"}`
	if err := raw.Set(ctx, s.keysOf(h).rec, old, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	bob := Principal{Issuer: "https://issuer.example", Subject: "bob"}
	if got, err := other.Get(ctx, id); err != nil || !got.Principal.Same(bob) || got.ClientAddr != "" {
		t.Errorf("Get of the previous build's record = %+v, %v", got, err)
	}
	if err := s.refresh(ctx, id, h); err != nil {
		t.Fatal(err)
	}
	b, err := s.Create(ctx, Record{Principal: bob})
	if err != nil {
		t.Errorf("bob's session beside one of the previous build: %v", err)
	}
	if err := other.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(ctx, Record{Principal: bob}); !errors.Is(err, ErrOwnerLimit) {
		t.Errorf("bob's second session of this build: %v, want ErrOwnerLimit", err)
	}
	if b != nil {
		if _, err := s.Get(ctx, b.ID); err != nil {
			t.Errorf("bob's session after the previous build's was deleted: %v", err)
		}
	}
}

// TestRedisOwnerKeyRoundTrips: keeping the owner beside the record costs no round trip:
// Create and Get take one, Touch and Delete of a session the store knows take what they
// did, and of a session it has not seen, one more: to read the owner key.
func TestRedisOwnerKeyRoundTrips(t *testing.T) {
	opts := RedisOptions{IdleTimeout: time.Minute, MaxPerPrincipal: 5, MaxPerAnonymousAddr: 5}
	s := OpenTestRedisStore(t, opts)
	opts.KeyPrefix = s.opts.KeyPrefix
	raw := rawClient(redisAddr(t))
	defer raw.Close()
	ctx := context.Background()
	alice := Principal{Issuer: "https://issuer.example", Subject: "alice"}

	// Each step runs on a replica of its own; the first round loads the scripts.
	for round := range 2 {
		for _, in := range []Record{{Principal: alice, ClientAddr: "192.0.2.1"}, {ClientAddr: "192.0.2.1"}, {}} {
			replicas := make([]*RedisStore, 4)
			logs := make([]*commandLog, 4)
			for i := range replicas {
				replicas[i] = OpenTestRedisStore(t, opts)
				logs[i] = logCommands(replicas[i])
			}
			// check counts the round trips of replica i since the last check, but those that
			// set up a new connection.
			check := func(what string, i, want int) {
				t.Helper()
				trips, cmds := logs[i].take()
				trips -= strings.Count(strings.Join(cmds, " "), "hello")
				if round > 0 && trips != want {
					t.Errorf("%s %s: %d round trips (%v), want %d", in.Principal, in.ClientAddr, trips, cmds, want)
				}
			}
			a, err := replicas[0].Create(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			check("Create", 0, 1)
			if _, err := replicas[1].Get(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			check("Get", 1, 1)
			for i, want := range []int{1, 1, 2} { // it created it, read it, or has not seen it
				if err := replicas[i].refresh(ctx, a.ID, sessionHash(a.ID)); err != nil {
					t.Fatal(err)
				}
				check(fmt.Sprintf("Touch on replica %d", i+1), i, want)
			}
			if err := replicas[3].Delete(ctx, a.ID); err != nil { // has not seen it
				t.Fatal(err)
			}
			check("Delete on a replica that has not seen it", 3, 2)
			b, err := replicas[0].Create(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			logs[0].take()
			if err := replicas[0].Delete(ctx, b.ID); err != nil {
				t.Fatal(err)
			}
			check("Delete on the replica that created it", 0, 1)
		}
	}
	if keys, _ := scanKeys(t, s.opts.KeyPrefix); len(keys) != 0 {
		t.Errorf("keys left after the sessions were deleted: %v", keys)
	}
}
