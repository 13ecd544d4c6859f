package session

import "github.com/redis/go-redis/v9"

// The Lua scripts of a RedisStore. Each touches the keys of one session only, or global keys
// of one slot only (the index of live sessions and the owner sets, which share its hash
// slot), so that each runs on one node of a cluster: work that spans a session's keys and
// global keys is split into a script per slot, sent in one pipeline where possible. Times
// that decide expiry are Redis's own (TIME); the others come from the store's clock, as
// arguments.

// luaPrelude holds the helpers the task and reverse scripts share.
//
// dropIndex removes the entry name from the session's index hash idx if it leads to the
// record id, and appends (name, value) to res, for the caller to delete the global key
// when it still holds that value.
//
// dropTask removes task id from the session's task keys: its record (tasks), its member in
// the set of ttl deadlines (tdl) and in the set of ended tasks (tend), and its entries in
// idx. The members ek and dk, when given, are removed whatever the record says.
const luaPrelude = `
local function dropIndex(idx, res, name, id)
  local iv = redis.call('HGET', idx, name)
  if not iv then return end
  local ok, o = pcall(cjson.decode, iv)
  if ok and type(o) == 'table' and o.id == id then
    redis.call('HDEL', idx, name)
    res[#res + 1] = name
    res[#res + 1] = iv
  end
end
local function dropTask(tasks, tdl, tend, idx, res, id, ek, dk)
  if ek then redis.call('ZREM', tend, ek) end
  if dk then redis.call('ZREM', tdl, dk) end
  local v = redis.call('HGET', tasks, id)
  if not v then return end
  redis.call('HDEL', tasks, id)
  local ok, t = pcall(cjson.decode, v)
  if not ok or type(t) ~= 'table' then return end
  if type(t.ek) == 'string' then redis.call('ZREM', tend, t.ek) end
  if type(t.dk) == 'string' then redis.call('ZREM', tdl, t.dk) end
  if type(t.th) == 'string' then dropIndex(idx, res, 'task:' .. t.th, id) end
  if type(t.uh) == 'string' then dropIndex(idx, res, 'taskup:' .. t.uh, id) end
end
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// admitOwnerFull is scriptAdmit's answer when the owner's set is full.
const admitOwnerFull = -1

// scriptAdmit admits a new session to the index of live sessions (KEYS[1]), to the index of
// activity (KEYS[2], the sessions by their client's last request, in the same slot) and, if
// KEYS[3] is given, to the set of its owner (KEYS[3], in the same slot): the index of live
// sessions and the owners' sets are sorted sets of session hashes by expiry in Redis ms. It
// drops the expired members of each. When ARGV[3] > 0 members of the index are left, it
// evicts the member of the index of activity with the lowest score if that score is at most
// ARGV[6] (> 0; its members no longer in the index of live sessions it drops on the way),
// unless ARGV[4] members of the owner's set are left: it removes the evicted session from
// both indexes (the caller deletes the rest of it). It refuses with {0} when no session can
// be evicted, with {-1} (admitOwnerFull) when ARGV[4] members of the owner's set are left;
// else it adds ARGV[1] to the indexes, to expire in ARGV[2] ms, with ARGV[5] (ms on the
// stores' clock) as its last request, and returns {1, the hash of the session evicted or
// ""}. Each set expires with its last member. (The members of deleted sessions were removed
// by their Delete; a member's score is when its session's keys expire, as its Create and
// Touch set them both: a script of one slot cannot ask another whether a record still
// exists.)
var scriptAdmit = redis.NewScript(luaPrelude + `
local now = nowMs()
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if #KEYS > 2 then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now) end
local function ownerFull()
  return #KEYS > 2 and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[4])
end
local victim = ''
local cap = tonumber(ARGV[3])
if cap > 0 and redis.call('ZCARD', KEYS[1]) >= cap then
  local before = tonumber(ARGV[6])
  if before <= 0 then return {0} end
  if ownerFull() then return {-1} end
  while victim == '' do
    local idle = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', before, 'LIMIT', 0, 16)
    if #idle == 0 then return {0} end
    for _, m in ipairs(idle) do
      if redis.call('ZSCORE', KEYS[1], m) then
        victim = m
        break
      end
      redis.call('ZREM', KEYS[2], m)
    end
  end
  redis.call('ZREM', KEYS[1], victim)
  redis.call('ZREM', KEYS[2], victim)
end
if ownerFull() then return {-1} end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
if #KEYS > 2 then
  redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[3], ttl)
end
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ttl)
return {1, victim}
`)

// scriptMarkActive writes a request of the client of session ARGV[1] at ARGV[2] (ms on the
// stores' clock) to the index of activity (KEYS[2]) if the session is in the index of live
// sessions (KEYS[1]), unless a later one is there already, and puts off that index's expiry
// to ARGV[3] ms from now.
var scriptMarkActive = redis.NewScript(`
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[2], 'GT', ARGV[2], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`)

// scriptIndexTouch puts off the expiry of member ARGV[1] of the index of live sessions
// (KEYS[1]) and of its owner's set (KEYS[2], if given) to ARGV[2] ms from now, in each
// where it is a member, and the set's own expiry with it.
var scriptIndexTouch = redis.NewScript(luaPrelude + `
local at = nowMs() + tonumber(ARGV[2])
for i = 1, #KEYS do
  if redis.call('ZADD', KEYS[i], 'XX', 'CH', at, ARGV[1]) > 0 then redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
end
return 0
`)

// scriptActivePrune drops from the index of activity (KEYS[2]) its members whose last request
// is at most ARGV[1] (ms on the stores' clock: the idle timeout ago, so that a session that
// expired is among them) and that are no longer in the index of live sessions (KEYS[1]): of
// those, at most ARGV[2] are looked at. (Delete and eviction remove their members; expiry
// leaves them.)
var scriptActivePrune = redis.NewScript(`
local n = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])) do
  if not redis.call('ZSCORE', KEYS[1], m) then
    redis.call('ZREM', KEYS[2], m)
    n = n + 1
  end
end
return n
`)

// scriptIndexPrune drops the expired members of the index of live sessions (KEYS[1]).
var scriptIndexPrune = redis.NewScript(luaPrelude + `
return redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', nowMs())
`)

// scriptGet returns a session's record, its ttl in milliseconds, its owner key ("" if it
// has none) and its connections (field, value, ...), or nil when there is no record. KEYS:
// the record, its connections, its owner key.
var scriptGet = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then return nil end
local res = {v, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[3]) or ''}
for _, x in ipairs(redis.call('HGETALL', KEYS[2])) do table.insert(res, x) end
return res
`)

// scriptOwner returns the ttl of a session's record in milliseconds (-2 if it is gone) and
// its owner key ("" if it has none), whether or not the record is there. KEYS: the record,
// its owner key.
var scriptOwner = redis.NewScript(`
return {redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]) or ''}
`)

// scriptSetConnection records that replica ARGV[2] holds the session's own connection to
// upstream ARGV[1] (KEYS: the record, its connections), with the record's ttl; nothing if the
// record is gone.
var scriptSetConnection = redis.NewScript(`
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
`)

// scriptClearConnection forgets the session's connection to upstream ARGV[1] (KEYS[1]) if
// replica ARGV[2] holds it.
var scriptClearConnection = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
`)

// scriptRefresh sets the ttl of a session's keys (KEYS: rec, rev, tasks, tdl, tend, idx,
// then the others: sessionKeys.all) to ARGV[1] ms if its record exists. It returns {0} if not, else {1, the names of the session's
// global index keys...}, whose ttls the caller sets too.
var scriptRefresh = redis.NewScript(`
if redis.call('PEXPIRE', KEYS[1], ARGV[1]) == 0 then return {0} end
for i = 2, #KEYS do redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
local res = redis.call('HKEYS', KEYS[6])
table.insert(res, 1, 1)
return res
`)

// scriptUpdate replaces a session's record (KEYS[1]) by ARGV[2] if it still is ARGV[1],
// keeping its ttl: it returns {1, the ttl left in ms (-1 if none)} if it did, {0} if the
// record changed meanwhile, {-1} if it is gone.
var scriptUpdate = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return {-1} end
if cur ~= ARGV[1] then return {0} end
redis.call('SET', KEYS[1], ARGV[2], 'KEEPTTL')
return {1, redis.call('PTTL', KEYS[1])}
`)

// scriptDelete deletes a session's keys (KEYS: rec, rev, tasks, tdl, tend, idx, then the
// others: sessionKeys.all) and returns its index hash (name, value, ...), whose global keys the caller deletes.
var scriptDelete = redis.NewScript(`
local res = redis.call('HGETALL', KEYS[6])
redis.call('DEL', unpack(KEYS))
return res
`)

// scriptDeleteIfEqual deletes KEYS[1] if it holds ARGV[1]: a global index key that another
// record has not taken over since.
var scriptDeleteIfEqual = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// scriptPutReverse stores reverse record ARGV[2] under id ARGV[1] in a session's hash
// (KEYS: rec, rev, idx) with index entry (ARGV[3], ARGV[4]), the keys taking the record's
// ttl. It returns 0 if the session does not exist, else 1.
var scriptPutReverse = redis.NewScript(luaPrelude + `
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then return 0 end
local old = redis.call('HGET', KEYS[2], ARGV[1])
if old then
  local ok, o = pcall(cjson.decode, old)
  if ok and type(o) == 'table' and type(o.uh) == 'string' then dropIndex(KEYS[3], {}, 'revup:' .. o.uh, ARGV[1]) end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[3], ARGV[4])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[2], ttl)
  redis.call('PEXPIRE', KEYS[3], ttl)
end
return 1
`)

// scriptTakeReverse removes and returns the reverse record of id ARGV[1] of a session
// (KEYS: rev, idx): {} if there is none, else {record, index entry name, value} (the entry
// only if it led to this record).
var scriptTakeReverse = redis.NewScript(luaPrelude + `
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return {} end
redis.call('HDEL', KEYS[1], ARGV[1])
local res = {v}
local ok, o = pcall(cjson.decode, v)
if ok and type(o) == 'table' and type(o.uh) == 'string' then dropIndex(KEYS[2], res, 'revup:' .. o.uh, ARGV[1]) end
return res
`)

// scriptPutTask stores a task record in a session (KEYS: rec, tasks, tdl, tend, idx), within
// the session's bound of records. ARGV: 1 id, 2 record, 3 its member in tdl or "", 4 its
// member in tend or "", 5 the bound below which a member of tdl is past its ttl, 6 the bound
// below which a member of tend is past its retention, 7 the bound of records, 8..11 the two
// index entries (name, value). Members of tdl and tend begin with a time (nanoKey, 20
// bytes) and end with the task id, so that these bounds are exact. A record under the same
// id goes first. When the session is full, the records gone (ttl passed, retention passed)
// go, then if need be the one that ended first. It returns {status, dropped index entries
// (name, value)...}: status 1 stored, 0 no such session, -1 full of unfinished tasks.
var scriptPutTask = redis.NewScript(luaPrelude + `
local res = {0}
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -2 then return res end
local tasks, tdl, tend, idx = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id = ARGV[1]
if redis.call('HEXISTS', tasks, id) == 1 then dropTask(tasks, tdl, tend, idx, res, id) end
local cap = tonumber(ARGV[7])
if redis.call('HLEN', tasks) >= cap then
  for _, m in ipairs(redis.call('ZRANGEBYLEX', tdl, '-', '(' .. ARGV[5])) do
    dropTask(tasks, tdl, tend, idx, res, string.sub(m, 22), nil, m)
  end
  for _, m in ipairs(redis.call('ZRANGEBYLEX', tend, '-', '(' .. ARGV[6])) do
    dropTask(tasks, tdl, tend, idx, res, string.sub(m, 43), m)
  end
  if redis.call('HLEN', tasks) >= cap then
    local first = redis.call('ZRANGE', tend, 0, 0)
    if #first == 0 then
      res[1] = -1
      return res
    end
    dropTask(tasks, tdl, tend, idx, res, string.sub(first[1], 43), first[1])
  end
end
redis.call('HSET', tasks, id, ARGV[2])
if ARGV[3] ~= '' then redis.call('ZADD', tdl, 0, ARGV[3]) end
if ARGV[4] ~= '' then redis.call('ZADD', tend, 0, ARGV[4]) end
redis.call('HSET', idx, ARGV[8], ARGV[9], ARGV[10], ARGV[11])
if ttl > 0 then
  for i = 2, 5 do redis.call('PEXPIRE', KEYS[i], ttl) end
end
res[1] = 1
return res
`)

// scriptEndTask records that task ARGV[1] of a session (KEYS: tasks, tend) ended at ARGV[2]
// (a JSON string), whose nanoKey is ARGV[3], unless it ended before. It returns 1 if it set
// the end, else 0. The record is extended as text, not re-encoded, so that the rest of it
// stays byte for byte as the store wrote it.
var scriptEndTask = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return 0 end
local ok, t = pcall(cjson.decode, v)
if not ok or type(t) ~= 'table' or t.ended ~= nil or type(t.cn) ~= 'string' or string.sub(v, -1) ~= '}' then return 0 end
local ek = ARGV[3] .. '|' .. t.cn .. '|' .. ARGV[1]
redis.call('HSET', KEYS[1], ARGV[1], string.sub(v, 1, -2) .. ',"ended":' .. ARGV[2] .. ',"ek":' .. cjson.encode(ek) .. '}')
redis.call('ZADD', KEYS[2], 0, ek)
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1
`)

// scriptDropTasks removes the tasks ARGV of a session (KEYS: tasks, tdl, tend, idx) and
// returns their index entries (name, value, ...).
var scriptDropTasks = redis.NewScript(luaPrelude + `
local res = {}
for i = 1, #ARGV do dropTask(KEYS[1], KEYS[2], KEYS[3], KEYS[4], res, ARGV[i]) end
return res
`)
