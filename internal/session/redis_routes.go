package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The routing tables and task records of a RedisStore (Routes, Tasks). A record lives in its
// session's hash, which goes with the session; a global index key leads to it from what is
// not a session id (upstream ids, task ids), holding the session's hash and the record's id.
// A lookup through an index key reads the record in the session's hash, so an index key
// left behind by a record that has gone leads nowhere.
//
// The bounds of MemoryStore apply: MaxTasksPerSession records a session, the first to end
// making room, ended tasks kept TaskRetention, and none past its ttl. Differences: Put* of a
// session that does not exist (or no longer) fails with ErrNotFound and stores nothing; a
// task id is unique within its session only (the gateway's ids are random, 96 bits): a
// second PutTask of an id in another session leaves the first record in its session, where
// TasksOf still lists it, and Task(id) finds the second.

// RedisRoutes keeps the routing tables and task records of the sessions of a RedisStore, on
// its client: the store's Routes and Tasks. It is safe for concurrent use.
type RedisRoutes struct{ *redisConn }

var (
	_ Routes = (*RedisRoutes)(nil)
	_ Tasks  = (*RedisRoutes)(nil)
)

// PutReverse implements Routes. It fails with ErrNotFound if the session does not exist.
func (s *RedisRoutes) PutReverse(ctx context.Context, r ReverseRecord) error {
	hash := sessionHash(r.SessionID)
	k := s.keysOf(hash)
	value, w, err := encodeReverse(r, hash)
	if err != nil {
		return opError(ctx, "put reverse", err)
	}
	name, index := "revup:"+w.UpHash, encodeIndex(hash, r.ID)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pipe := s.client.Pipeline()
	pipe.Set(ctx, s.globalKey(name), index, s.opts.IdleTimeout)
	put := scriptPutReverse.Eval(ctx, pipe, []string{k.rec, k.rev, k.idx}, r.ID, value, name, index)
	if _, err := pipe.Exec(ctx); err != nil {
		return opError(ctx, "put reverse", err)
	}
	if n, _ := put.Int(); n != 1 {
		_ = s.deleteIndexEntries(ctx, []string{name, index}, nil)
		return fmt.Errorf("session store: put reverse: %w", ErrNotFound)
	}
	return nil
}

// TakeReverse implements Routes.
func (s *RedisRoutes) TakeReverse(ctx context.Context, sessionID, id string) (ReverseRecord, error) {
	hash := sessionHash(sessionID)
	k := s.keysOf(hash)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	res, err := scriptTakeReverse.Run(ctx, s.client, []string{k.rev, k.idx}, id).StringSlice()
	if err != nil {
		return ReverseRecord{}, opError(ctx, "take reverse", err)
	}
	if len(res) == 0 {
		return ReverseRecord{}, ErrNotFound
	}
	if err := s.deleteIndexEntries(ctx, res[1:], nil); err != nil {
		return ReverseRecord{}, opError(ctx, "take reverse", err)
	}
	rec, _, err := decodeReverse(res[0], sessionID, hash)
	if err != nil {
		return ReverseRecord{}, s.undecodable("take reverse", "reverse request", hash, err)
	}
	return rec, nil
}

// ReverseByUpstream implements Routes. SessionID is "" for a session this store has not
// seen (see RedisStore).
func (s *RedisRoutes) ReverseByUpstream(ctx context.Context, upstream, upstreamID string) (ReverseRecord, error) {
	uh := upstreamHash(upstream, upstreamID)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	ix, value, err := s.lookup(ctx, "revup:"+uh, func(k sessionKeys) string { return k.rev })
	if err != nil {
		return ReverseRecord{}, opError(ctx, "reverse by upstream", err)
	}
	sessionID := s.idOf(ix.Session)
	rec, w, err := decodeReverse(value, sessionID, ix.Session)
	if err != nil {
		return ReverseRecord{}, s.undecodable("reverse by upstream", "reverse request", ix.Session, err)
	}
	if w.UpHash != uh || w.ID != ix.ID {
		return ReverseRecord{}, ErrNotFound // the index key outlived its record, whose id was reused
	}
	rec.Upstream = upstream
	return rec, nil
}

// lookup follows global index key name to the record it leads to in the session's hash
// that field names: ErrNotFound if either is missing.
func (s *RedisRoutes) lookup(ctx context.Context, name string, field func(sessionKeys) string) (indexWire, string, error) {
	data, err := s.client.Get(ctx, s.globalKey(name)).Result()
	if errors.Is(err, redis.Nil) {
		return indexWire{}, "", ErrNotFound
	}
	if err != nil {
		return indexWire{}, "", err
	}
	ix, err := decodeIndex(data)
	if err != nil {
		return indexWire{}, "", s.undecodable("lookup", "index", "", err)
	}
	value, err := s.client.HGet(ctx, field(s.keysOf(ix.Session)), ix.ID).Result()
	if errors.Is(err, redis.Nil) {
		return indexWire{}, "", ErrNotFound
	}
	if err != nil {
		return indexWire{}, "", err
	}
	return ix, value, nil
}

var _ Tasks = (*RedisStore)(nil)

// PutTask implements Tasks. It fails with ErrNotFound if the session does not exist.
func (s *RedisRoutes) PutTask(ctx context.Context, t TaskRecord) error {
	if t.Created.IsZero() {
		t.Created = s.opts.Now()
	}
	now := s.opts.Now()
	hash := sessionHash(t.SessionID)
	k := s.keysOf(hash)
	value, w, err := encodeTask(t, hash)
	if err != nil {
		return opError(ctx, "put task", err)
	}
	index := encodeIndex(hash, t.ID)
	entries := map[string]string{"task:" + w.IDHash: index, "taskup:" + w.UpHash: index}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	pipe := s.client.Pipeline()
	for name, v := range entries {
		pipe.Set(ctx, s.globalKey(name), v, s.opts.IdleTimeout)
	}
	put := scriptPutTask.Eval(ctx, pipe, []string{k.rec, k.tasks, k.tdl, k.tend, k.idx},
		t.ID, value, w.DeadlineKey, w.EndKey, nanoKey(now.Add(1)), nanoKey(now.Add(-TaskRetention).Add(1)),
		MaxTasksPerSession, "task:"+w.IDHash, index, "taskup:"+w.UpHash, index)
	if _, err := pipe.Exec(ctx); err != nil {
		return opError(ctx, "put task", err)
	}
	res, err := put.Slice()
	if err != nil || len(res) == 0 {
		return fmt.Errorf("session store: put task: unexpected answer %v: %v", res, err)
	}
	dropped := make([]string, 0, len(res)-1)
	for _, v := range res[1:] {
		if v, ok := v.(string); ok {
			dropped = append(dropped, v)
		}
	}
	status, _ := res[0].(int64)
	if status != 1 {
		// The new index keys lead nowhere: they go too.
		for name, v := range entries {
			dropped = append(dropped, name, v)
		}
		entries = nil
	}
	if err := s.deleteIndexEntries(ctx, dropped, entries); err != nil {
		return opError(ctx, "put task", err)
	}
	switch status {
	case 1:
		return nil
	case -1:
		return ErrTooManyTasks
	default:
		return fmt.Errorf("session store: put task: %w", ErrNotFound)
	}
}

// Task implements Tasks. SessionID is "" for a session this store has not seen (see
// RedisStore).
func (s *RedisRoutes) Task(ctx context.Context, id string) (TaskRecord, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	t, _, err := s.taskBy(ctx, "task:"+taskHash(id), "task")
	if err != nil {
		return TaskRecord{}, err
	}
	if t.ID != id {
		return TaskRecord{}, ErrNotFound
	}
	return t, nil
}

// TaskByUpstream implements Tasks. SessionID is "" for a session this store has not seen
// (see RedisStore).
func (s *RedisRoutes) TaskByUpstream(ctx context.Context, upstream, upstreamID string) (TaskRecord, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	uh := upstreamHash(upstream, upstreamID)
	t, w, err := s.taskBy(ctx, "taskup:"+uh, "task by upstream")
	if err != nil {
		return TaskRecord{}, err
	}
	if w.UpHash != uh {
		return TaskRecord{}, ErrNotFound // the index key outlived its record, whose id was reused
	}
	t.Upstream = upstream
	return t, nil
}

// taskBy finds a live task through index key name.
func (s *RedisRoutes) taskBy(ctx context.Context, name, op string) (TaskRecord, taskWire, error) {
	ix, value, err := s.lookup(ctx, name, func(k sessionKeys) string { return k.tasks })
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return TaskRecord{}, taskWire{}, err
		}
		return TaskRecord{}, taskWire{}, opError(ctx, op, err)
	}
	t, w, err := decodeTask(value, s.idOf(ix.Session), ix.Session)
	if err != nil {
		return TaskRecord{}, w, s.undecodable(op, "task", ix.Session, err)
	}
	if w.ID != ix.ID {
		return TaskRecord{}, w, ErrNotFound
	}
	if taskGone(t, s.opts.Now()) {
		if err := s.dropTasks(ctx, ix.Session, t.ID); err != nil {
			return TaskRecord{}, w, opError(ctx, op, err)
		}
		return TaskRecord{}, w, ErrNotFound
	}
	return t, w, nil
}

// dropTasks removes tasks ids of session hash, and their index keys.
func (s *RedisRoutes) dropTasks(ctx context.Context, hash string, ids ...string) error {
	k := s.keysOf(hash)
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	entries, err := scriptDropTasks.Run(ctx, s.client, []string{k.tasks, k.tdl, k.tend, k.idx}, args...).StringSlice()
	if err != nil {
		return fmt.Errorf("drop tasks: %w", err)
	}
	return s.deleteIndexEntries(ctx, entries, nil)
}

// TasksOf implements Tasks. A record that cannot be read is left out (and logged).
func (s *RedisRoutes) TasksOf(ctx context.Context, sessionID string) ([]TaskRecord, error) {
	hash := sessionHash(sessionID)
	k := s.keysOf(hash)
	ctx, cancel := s.bound(ctx)
	defer cancel()
	values, err := s.client.HVals(ctx, k.tasks).Result()
	if err != nil {
		return nil, opError(ctx, "tasks of", err)
	}
	now := s.opts.Now()
	var out []TaskRecord
	var gone []string
	for _, v := range values {
		t, _, err := decodeTask(v, sessionID, hash)
		if err != nil {
			_ = s.undecodable("tasks of", "task", hash, err)
			continue
		}
		if taskGone(t, now) {
			gone = append(gone, t.ID)
			continue
		}
		out = append(out, t)
	}
	if len(gone) > 0 {
		if err := s.dropTasks(ctx, hash, gone...); err != nil {
			return nil, opError(ctx, "tasks of", err)
		}
	}
	return out, nil
}

// EndTask implements Tasks.
func (s *RedisRoutes) EndTask(ctx context.Context, id string) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	data, err := s.client.Get(ctx, s.globalKey("task:"+taskHash(id))).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return opError(ctx, "end task", err)
	}
	ix, err := decodeIndex(data)
	if err != nil || ix.ID != id {
		return nil // nothing this store can end
	}
	now := s.opts.Now()
	ended, err := json.Marshal(now)
	if err != nil {
		return opError(ctx, "end task", err)
	}
	k := s.keysOf(ix.Session)
	if err := scriptEndTask.Run(ctx, s.client, []string{k.tasks, k.tend}, id, string(ended), nanoKey(now)).Err(); err != nil {
		return opError(ctx, "end task", err)
	}
	return nil
}
