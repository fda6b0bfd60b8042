package redisstore

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// The window arithmetic is keypool's (window.go), in milliseconds: a sliding
// window keeps n buckets of width span/(n-1), rounded up, and counts a
// bucket until all of it has left the span. A bucket holds at most
// maxBucket requests and as many tokens.
const (
	minuteBuckets = windowspec.MinuteBuckets
	minuteWidth   = int64(windowspec.MinuteWidth / time.Millisecond)
	dayBuckets    = windowspec.DayBuckets
	dayWidth      = int64(windowspec.DayWidth / time.Millisecond)
	maxBucket     = math.MaxUint32
)

// The lives of what the store keeps, in milliseconds, and its bounds.
const (
	// windowMargin is added to the life of every window.
	windowMargin = int64(time.Minute / time.Millisecond)
	// expiryRefresh is how old the expiry of the index or a sliding
	// window may grow before a write sets it again: less than the margin.
	expiryRefresh = windowMargin / 2
	// indexLife is how long a key's index lives after its last take.
	indexLife = int64(48 * time.Hour / time.Millisecond)
	// levelLife is how long a key's benches and levels live
	// after its latest bench ends.
	levelLife = int64(24 * time.Hour / time.Millisecond)
	// maxModels bounds the models a key tracks, as keypool.MemoryStore
	// does: model names come from requests. Models beyond it share one
	// entry, overflowModel.
	maxModels     = windowspec.MaxModelsPerKey
	overflowModel = windowspec.OverflowModel
	// evictScan bounds the entries a take for a new model looks at to make
	// room on a full key, as keypool.MemoryStore does.
	evictScan = 32
	// maxExact bounds limits and token counts: Lua numbers are doubles.
	maxExact = int64(1) << 53
	// reasonMinute and reasonDay are a take's refusals by a minute or a day
	// window, in the take script's answer.
	reasonMinute = -1
	reasonDay    = -2
)

// prelude is the Lua every script starts with. Integers reach Redis as
// strings written with %d (Lua 5.1's tostring would write 1e+14 and more
// with an exponent, and Redis 7.2.0–7.2.4 wrote large numbers passed to
// redis.call that way). Time is the server's, in milliseconds, and never
// earlier than the latest take of the key, so what is taken counts at least
// as long as it should when the server's clock steps back.
const prelude = `
redis.replicate_commands()
local MN, MW, DN, DW, MAXB, MARGIN, REFRESH = $MN, $MW, $DN, $DW, $MAXB, $MARGIN, $REFRESH
local function int(x) return string.format('%d', x) end
-- key reads a key's index: the server's time, never before the key's
-- latest take; whether the key knows model m; when the index's expiry was
-- last set.
local function key(idx, m)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local v = redis.call('HMGET', idx, 't', 'x', 'm' .. m)
  local last = tonumber(v[1]) or 0
  if last > now then now = last end
  return now, v[3] and true or false, tonumber(v[2]) or 0, tonumber(v[3]) or 0
end
-- bench reads a bench, "kind:end"; no bench is 0, 0.
local function bench(v)
  if not v then return 0, 0 end
  local k, e = string.match(v, '^(%d+):(%d+)$')
  return tonumber(k) or 0, tonumber(e) or 0
end
-- evict removes from a full key one model entry that holds nothing in force
-- at now — its field m<name> holds when its windows last count a take, and
-- it has no bench in force and no level — looking at no more than
-- EVICTSCAN entries from where the last look ended (field c). It reports
-- whether it removed one. The entry's windows stay until they expire.
local function evict(idx, benches, over, now)
  local r = redis.call('HSCAN', idx, redis.call('HGET', idx, 'c') or '0', 'MATCH', 'm*', 'COUNT', $EVICTSCAN)
  redis.call('HSET', idx, 'c', r[1])
  local kv = r[2]
  for j = 1, #kv, 2 do
    local name = string.sub(kv[j], 2)
    if name ~= over and (tonumber(kv[j + 1]) or 0) <= now then
      local b = redis.call('HMGET', benches, 'b' .. name, 'l' .. name)
      local _, e = bench(b[1])
      if e <= now and (tonumber(b[2]) or 0) == 0 then
        redis.call('HDEL', idx, kv[j])
        redis.call('HDEL', benches, 'b' .. name, 'l' .. name)
        return true
      end
    end
  end
  return false
end
-- model returns the name under which a key keeps model m: m itself once
-- the key knows it, while it knows fewer than max models, when an idle
-- entry makes room (evict), or when it is named (a model the pool was
-- configured for); else over. With add, the key learns it.
local function model(idx, benches, m, known, over, max, add, now, named)
  if known then return m end
  local n = redis.call('HLEN', idx)
  for _, f in ipairs({'t', 'd', 'x', 'c'}) do n = n - redis.call('HEXISTS', idx, f) end
  if n >= max and not named and not evict(idx, benches, over, now) then
    m = over
    if redis.call('HEXISTS', idx, 'm' .. m) == 1 then return m end
  end
  if add then
    redis.call('HSET', idx, 'm' .. m, '0')
    redis.call('PEXPIRE', idx, '$INDEXLIFE')
  end
  return m
end
-- sliding loads a sliding window: fields r<bucket> and t<bucket> hold the
-- requests and tokens taken in a bucket, x when its expiry was last set.
-- Buckets that have left the window of n buckets are deleted. In memory,
-- bucket i is at i - base, 1 to n: small integer keys, which every Lua
-- keeps compact.
local function sliding(key, width, n, now)
  local head = math.floor(now / width)
  local w = {key = key, width = width, n = n, now = now, head = head, base = head - n, r = {}, t = {}, sr = 0, st = 0, x = 0}
  local kv = redis.call('HGETALL', key)
  local stale = {}
  for j = 1, #kv, 2 do
    local f = kv[j]
    local i = tonumber(string.sub(f, 2))
    local v = tonumber(kv[j + 1]) or 0
    if f == 'x' then
      w.x = v
    elseif not i or i <= w.base or i > head then
      stale[#stale + 1] = f
    elseif string.sub(f, 1, 1) == 'r' then
      w.r[i - w.base] = v
      w.sr = w.sr + v
    else
      w.t[i - w.base] = v
      w.st = w.st + v
    end
  end
  if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
  return w
end
local function fits(w, lr, lt, tok, fr, ft)
  return (lr == 0 or w.sr - fr + 1 <= lr) and (lt == 0 or w.st - ft + tok <= lt)
end
-- slidingRoom reports whether one more request of tok tokens fits, and if
-- not when it will: when the oldest buckets that make room leave.
local function slidingRoom(w, lr, lt, tok)
  if fits(w, lr, lt, tok, 0, 0) then return true, 0 end
  local fr, ft = 0, 0
  for j = 1, w.n do
    fr = fr + (w.r[j] or 0)
    ft = ft + (w.t[j] or 0)
    if fits(w, lr, lt, tok, fr, ft) then return false, (w.base + j + w.n) * w.width end
  end
  return false, (w.head + w.n) * w.width
end
-- slidingAdd records req requests and tok tokens in the bucket of the
-- time the window was loaded at. The window's expiry, a bucket's life and a
-- margin, is set again once it is REFRESH old, which the margin covers.
local function slidingAdd(w, req, tok)
  local j = w.n
  local r, t = math.min((w.r[j] or 0) + req, MAXB), math.min((w.t[j] or 0) + tok, MAXB)
  w.r[j], w.t[j] = r, t
  local i = int(w.head)
  if w.now - w.x < REFRESH then
    redis.call('HSET', w.key, 'r' .. i, int(r), 't' .. i, int(t))
    return
  end
  redis.call('HSET', w.key, 'r' .. i, int(r), 't' .. i, int(t), 'x', int(w.now))
  redis.call('PEXPIRE', w.key, int(w.n * w.width + MARGIN))
end
-- bucketAdd changes the bucket of time at by req requests and tok tokens,
-- if it is still in the window, never below zero: it reads and writes that
-- one bucket.
local function bucketAdd(key, width, n, now, at, req, tok)
  local head, i = math.floor(now / width), math.floor(at / width)
  if i > head or i <= head - n then return end
  local fr, ft = 'r' .. int(i), 't' .. int(i)
  local v = redis.call('HMGET', key, fr, ft)
  local r = math.min(math.max((tonumber(v[1]) or 0) + req, 0), MAXB)
  local t = math.min(math.max((tonumber(v[2]) or 0) + tok, 0), MAXB)
  -- A bucket that was there is in a hash that expires.
  if redis.call('HSET', key, fr, int(r), ft, int(t)) > 0 then
    redis.call('PEXPIRE', key, int(n * width + MARGIN))
  end
end
-- calendar loads a calendar day: fields s and e bound it, r and t count it.
-- Given the client's day [s, e) and the next one's end e2, a day that has
-- ended by the server's clock gives way to the one of them that holds now;
-- the hash then expires a margin after the new day ends.
local function calendar(key, now, s, e, e2)
  local v = redis.call('HMGET', key, 's', 'e', 'r', 't')
  local c = {key = key, s = tonumber(v[1]), e = tonumber(v[2]), r = tonumber(v[3]) or 0, t = tonumber(v[4]) or 0}
  if s and (not c.e or now >= c.e) then
    if now >= e then s, e = e, e2 end
    c.s, c.e, c.r, c.t, c.life = math.min(s, now), e, 0, 0, e - now + MARGIN
  end
  return c
end
local function calendarRoom(c, lr, lt, tok)
  if (lr ~= 0 and c.r + 1 > lr) or (lt ~= 0 and c.t + tok > lt) then return false, c.e end
  return true, 0
end
local function calendarAdd(c, at, req, tok)
  if not c.e or at < c.s or at >= c.e then return end
  c.r = math.max(c.r + req, 0)
  c.t = math.max(c.t + tok, 0)
  redis.call('HSET', c.key, 's', int(c.s), 'e', int(c.e), 'r', int(c.r), 't', int(c.t))
  if c.life then redis.call('PEXPIRE', c.key, int(c.life)) end
end
`

// takeSource is the op "take": it checks and records one request.
//
// KEYS: the key's index, its benches, the model's minute and day windows,
// the overflow model's minute and day windows, the key's cap minute and day
// windows. The day keys name calendar or sliding windows as ARGV says.
//
// ARGV, after the op: model, overflow model, max models, tokens, RPM, TPM, RPD, TPD, cap
// RPM, cap TPM, cap RPD, cap TPD, for calendar days the day's start and end
// and the next day's end (0 0 0 for sliding days), and 1 for a named model
// (0 otherwise).
//
// It returns {1, at, 0, level} for a take it recorded at server time at, and
// {0, retryAt, reason, level} for one it refused: reason is the kind of the
// bench that holds the key, or reasonMinute or reasonDay.
const takeSource = `
ops.take = function()
local idx = KEYS[1]
local now, known, x, busy = key(idx, ARGV[1])
local m = model(idx, KEYS[2], ARGV[1], known, ARGV[2], tonumber(ARGV[3]), true, now, ARGV[16] == '1')
local mk, dk = KEYS[3], KEYS[4]
if m == ARGV[2] then mk, dk = KEYS[5], KEYS[6] end
local cs, ce, ce2 = tonumber(ARGV[13]), tonumber(ARGV[14]), tonumber(ARGV[15])
local mode = 's'
if cs ~= 0 then mode = 'c' end
if now - x < REFRESH then
  redis.call('HSET', idx, 't', int(now), 'd', mode)
else
  redis.call('HSET', idx, 't', int(now), 'd', mode, 'x', int(now))
  redis.call('PEXPIRE', idx, '$INDEXLIFE')
end

local b = redis.call('HMGET', KEYS[2], '*', 'b' .. m, 'l' .. m)
local level = tonumber(b[3]) or 0
local kind, ends = bench(b[1])
local mkind, mends = bench(b[2])
if mends > ends then kind, ends = mkind, mends end
if ends > now then return {0, ends, kind, level} end

local tok = tonumber(ARGV[4])
local function load(minute, day, o)
  local s = {lr = tonumber(ARGV[o]), lt = tonumber(ARGV[o + 1]), dr = tonumber(ARGV[o + 2]), dt = tonumber(ARGV[o + 3])}
  if s.lr ~= 0 or s.lt ~= 0 then s.minute = sliding(minute, MW, MN, now) end
  if s.dr ~= 0 or s.dt ~= 0 then
    if mode == 'c' then s.cal = calendar(day, now, cs, ce, ce2) else s.day = sliding(day, DW, DN, now) end
  end
  return s
end
local sets = {load(mk, dk, 5), load(KEYS[7], KEYS[8], 9)}
local ok, retry, reason = true, 0, reasonMinute
for _, s in ipairs(sets) do
  if s.minute then
    local fit, at = slidingRoom(s.minute, s.lr, s.lt, tok)
    if not fit then ok, retry = false, math.max(retry, at) end
  end
  local fit, at = true, 0
  if s.day then fit, at = slidingRoom(s.day, s.dr, s.dt, tok) end
  if s.cal then fit, at = calendarRoom(s.cal, s.dr, s.dt, tok) end
  if not fit then ok, retry, reason = false, math.max(retry, at), reasonDay end
end
if not ok then return {0, retry, reason, level} end
for _, s in ipairs(sets) do
  if s.minute then slidingAdd(s.minute, 1, tok) end
  if s.day then slidingAdd(s.day, 1, tok) end
  if s.cal then calendarAdd(s.cal, now, 1, tok) end
end
-- The entry holds the take for as long as its windows count it; a take
-- needs the field written again only once that moment has moved on by
-- REFRESH.
local hold = now
if sets[1].minute then hold = now + MW * MN end
if sets[1].day or sets[1].cal then hold = now + DW * DN end
if m ~= ARGV[2] and (not known or hold - busy > REFRESH) then redis.call('HSET', idx, 'm' .. m, int(hold)) end
return {1, now, 0, level}
end
`

// adjustSource is the op "adjust": it changes what a recorded take counts: a settle's tokens, or a
// release's request and tokens, in the windows the take counted in, if the
// bucket (or the calendar day) of the take is still in them.
//
// KEYS: as the take script's, without the benches.
//
// ARGV, after the op: model, at (the take's server time), requests, tokens, and 1 or 0 for
// each of: the model's minute window, its day window, the cap's minute
// window, the cap's day window, calendar days.
const adjustSource = `
ops.adjust = function()
local idx = KEYS[1]
local now, known = key(idx, ARGV[1])
local mk, dk = KEYS[2], KEYS[3]
if not known then mk, dk = KEYS[4], KEYS[5] end
local at, req, tok = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cal = ARGV[9] == '1'
local function apply(minute, day, fm, fd)
  if fm == '1' then bucketAdd(minute, MW, MN, now, at, req, tok) end
  if fd == '1' then
    if cal then
      calendarAdd(calendar(day, now), at, req, tok)
    else
      bucketAdd(day, DW, DN, now, at, req, tok)
    end
  end
end
apply(mk, dk, ARGV[5], ARGV[6])
apply(KEYS[6], KEYS[7], ARGV[7], ARGV[8])
return 1
end
`

// benchSource is the op "bench": it sets a key aside, never for less time than a bench already
// set; it records the level for the model. The benches' hash lives until a
// day after its latest bench ends, and its expiry only ever extends.
//
// KEYS: the key's index, its benches.
//
// ARGV, after the op: model, overflow model, max models, 1 for all models, kind, end
// (Unix milliseconds), level.
const benchSource = `
ops.bench = function()
local now, known = key(KEYS[1], ARGV[1])
local f = '*'
if ARGV[4] ~= '1' then
  local m = model(KEYS[1], KEYS[2], ARGV[1], known, ARGV[2], tonumber(ARGV[3]), true, now, false)
  f = 'b' .. m
  redis.call('HSET', KEYS[2], 'l' .. m, ARGV[7])
end
local _, cur = bench(redis.call('HGET', KEYS[2], f))
if tonumber(ARGV[6]) > cur then redis.call('HSET', KEYS[2], f, ARGV[5] .. ':' .. ARGV[6]) end
local latest = 0
local kv = redis.call('HGETALL', KEYS[2])
for j = 1, #kv, 2 do
  local c = string.sub(kv[j], 1, 1)
  if c == '*' or c == 'b' then
    local _, e = bench(kv[j + 1])
    latest = math.max(latest, e)
  end
end
local life = math.max(latest - now, 0) + $LEVELLIFE
if redis.call('PTTL', KEYS[2]) < life then redis.call('PEXPIRE', KEYS[2], int(life)) end
return 1
end
`

// resetLevelSource is the op "reset": it sets a key's level for a model back to zero.
//
// KEYS: the key's index, its benches. ARGV, after the op: model,
// overflow model, max models.
const resetLevelSource = `
ops.reset = function()
local now, known = key(KEYS[1], ARGV[1])
local m = model(KEYS[1], KEYS[2], ARGV[1], known, ARGV[2], tonumber(ARGV[3]), true, now, false)
return redis.call('HDEL', KEYS[2], 'l' .. m)
end
`

// dispatch runs the op ARGV[1] names with the rest of ARGV.
const dispatch = `
local op = table.remove(ARGV, 1)
return ops[op]()
`

// storeScript is the store's one Lua script: every call names an op, so
// that every call of a pipeline is known to Redis, or none is (after a
// restart, a failover or SCRIPT FLUSH), and a pipeline re-sent by EVAL keeps
// its order.
var storeScript = func() *redis.Script {
	r := strings.NewReplacer(
		"$MN", strconv.Itoa(minuteBuckets),
		"$MW", strconv.FormatInt(minuteWidth, 10),
		"$DN", strconv.Itoa(dayBuckets),
		"$DW", strconv.FormatInt(dayWidth, 10),
		"$MAXB", strconv.FormatInt(maxBucket, 10),
		"$MARGIN", strconv.FormatInt(windowMargin, 10),
		"$REFRESH", strconv.FormatInt(expiryRefresh, 10),
		"$INDEXLIFE", strconv.FormatInt(indexLife, 10),
		"$LEVELLIFE", strconv.FormatInt(levelLife, 10),
		"$EVICTSCAN", strconv.Itoa(evictScan),
		"reasonMinute", strconv.Itoa(reasonMinute),
		"reasonDay", strconv.Itoa(reasonDay),
	)
	return redis.NewScript(r.Replace(prelude + "local ops = {}\n" +
		takeSource + adjustSource + benchSource + resetLevelSource + dispatch))
}()
