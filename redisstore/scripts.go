package redisstore

import (
	"fmt"
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
	// onceLife is how long a take's or an adjustment's answer is kept
	// under its ID, so that the call run again changes nothing: longer
	// than go-redis's retries of a call last.
	onceLife = int64(30 * time.Second / time.Millisecond)
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
// as long as it should when the server's clock steps back; a step back of
// more than windowspec.MaxStepBack, a clock put right after running ahead,
// moves what the key holds back with it, as the MemoryStore does.
const prelude = `
redis.replicate_commands()
$SERVERTIME
local MN, MW, DN, DW, MAXB, MARGIN, REFRESH = $MN, $MW, $DN, $DW, $MAXB, $MARGIN, $REFRESH
-- GUARD: how much longer than its span an exact window counts a request
-- (keypool's spanMs).
local GUARD = $GUARD
-- MAXSTEP: the longest step back of the clock the windows ride out by
-- counting at the latest time seen (keypool's MaxStepBack).
local MAXSTEP = $MAXSTEP
-- OVER: the entry models beyond the bound share (keypool's overflowModel).
local OVER = $OVER
local function int(x) return string.format('%d', x) end
-- entry reads a model's field of the index, "<busy>;<rpm>,<rpd>,<tpm>,<tpd>":
-- when its windows last count a take (Unix milliseconds), and the limits
-- the vendor last stated for it (0: not stated).
local function entry(v)
  local l = {0, 0, 0, 0}
  if not v then return 0, l end
  local busy, rest = string.match(v, '^(%d+);?(.*)$')
  local i = 1
  for n in string.gmatch(rest or '', '%d+') do
    if i <= 4 then l[i] = tonumber(n) end
    i = i + 1
  end
  return tonumber(busy) or 0, l
end
local function entryString(busy, l)
  return int(busy) .. ';' .. int(l[1]) .. ',' .. int(l[2]) .. ',' .. int(l[3]) .. ',' .. int(l[4])
end
-- bench reads a bench, "kind:end"; no bench is 0, 0.
local function bench(v)
  if not v then return 0, 0 end
  local k, e = string.match(v, '^(%d+):(%d+)$')
  return tonumber(k) or 0, tonumber(e) or 0
end
-- esc is the store's escape of a name within a Redis key's name.
local function esc(s)
  return (string.gsub(s, '[%z\1- \127-\255:{}%%]', function(c) return string.format('%%%02X', string.byte(c)) end))
end
-- shiftSliding moves what the sliding window of n buckets of width at key
-- holds d ms earlier, as when the clock that dated it is put back: by whole
-- buckets, no more than d, so that what was taken counts at least as long
-- as it should (keypool's sliding.shiftBack).
local function shiftSliding(key, width, n, d)
  local m = math.floor(d / width)
  -- A key of another type is left as it is: the op that names it fails
  -- on it, not every op of the key (see corrupt.go).
  local kv = redis.pcall('HGETALL', key)
  if kv.err or m <= 0 or #kv == 0 then return end
  local exact = false
  for j = 1, #kv, 2 do
    if kv[j] == 'e' then exact = true end
  end
  local fields = {}
  for j = 1, #kv, 2 do
    local f, v = kv[j], kv[j + 1]
    local c, i = string.sub(f, 1, 1), tonumber(string.sub(f, 2))
    if f == 'x' then
      v = '0' -- its expiry is set again at the next write
    elseif exact and c == 'r' and i then
      v = int((tonumber(v) or 0) - m * width) -- a request's own time
    elseif not exact and i then
      f = c .. int(i - m)
    end
    fields[#fields + 1] = f
    fields[#fields + 1] = v
  end
  redis.call('DEL', key)
  redis.call('HSET', key, unpack(fields))
  redis.call('PEXPIRE', key, int(n * width + MARGIN))
end
-- shiftBenches moves each bench in force at the wrong clock d ms earlier,
-- never to before now (keypool's benchState.shiftBack).
local function shiftBenches(key, d, now)
  local kv = redis.pcall('HGETALL', key)
  if kv.err then return end
  for j = 1, #kv, 2 do
    local c = string.sub(kv[j], 1, 1)
    if c == '*' or c == 'b' then
      local k, e = bench(kv[j + 1])
      if e > now then redis.call('HSET', key, kv[j], int(k) .. ':' .. int(math.max(e - d, now))) end
    end
  end
end
-- shift moves everything the index idx stands for — its benches, its
-- cap's windows, each model's windows and when they last count a take —
-- d ms earlier, to now, after the clock that dated them was put back by
-- d (keypool's memKey.shiftBack). Calendar days and spend carry over
-- where they are loaded (calendar, spendLoad). It reads the windows of
-- each model that still counts a take once moved, up to 1024 and the
-- named ones: once a step back, up to about a quarter of a second for
-- a key of 1024 models with full windows.
local function shift(idx, d, now)
  local base, k = string.match(idx, '^(.*:)i:([^:]*)$')
  if not base then return end
  shiftBenches(base .. 'b:' .. k, d, now)
  shiftSliding(base .. 'cm:' .. k, MW, MN, d)
  shiftSliding(base .. 'cd:' .. k, DW, DN, d)
  local kv = redis.call('HGETALL', idx)
  local fields = {}
  for j = 1, #kv, 2 do
    if string.sub(kv[j], 1, 1) == 'm' then
      local busy, l = entry(kv[j + 1])
      -- Windows that still count a take once moved move; the rest hold
      -- nothing in force then, and go (the entry may lag its windows by
      -- REFRESH). The overflow model's entry is not kept up by takes: its
      -- windows always move.
      local name = k .. ':' .. esc(string.sub(kv[j], 2))
      local wm, wd = base .. 'wm:' .. name, base .. 'wd:' .. name
      if kv[j] == 'm' .. OVER or busy + REFRESH + MW - d > now then
        shiftSliding(wm, MW, MN, d)
        shiftSliding(wd, DW, DN, d)
      else
        redis.pcall('DEL', wm, wd)
      end
      if busy > 0 then
        fields[#fields + 1] = kv[j]
        fields[#fields + 1] = entryString(math.max(busy - d, 0), l)
      end
    end
  end
  if #fields > 0 then redis.call('HSET', idx, unpack(fields)) end
end
-- key reads a key's index: the server's time, never before the key's
-- latest take, or, after a step back of the clock of more than MAXSTEP,
-- the server's time, to which what the key holds moves back (shift);
-- whether the key knows model m; when the index's expiry was last set;
-- the model's entry; and the latest time the key had seen.
local function key(idx, m)
  local now = servertime()
  local v = redis.call('HMGET', idx, 't', 'x', 'm' .. m)
  local last, x = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  if last - now > MAXSTEP then
    -- The key's time first: a shift that fails halfway is not run again.
    redis.call('HSET', idx, 't', int(now), 'x', '0')
    shift(idx, last - now, now)
    x, last = 0, now
    v[3] = redis.call('HGET', idx, 'm' .. m)
  elseif last > now then
    now = last
  end
  return now, v[3] and true or false, x, v[3], last
end
-- seen records that the key of index idx has seen the time now, after it
-- saw last, and sets the index's expiry again once REFRESH after x.
local function seen(idx, now, last, x)
  if now - x >= REFRESH then
    redis.call('HSET', idx, 't', int(now), 'x', int(now))
    redis.call('PEXPIRE', idx, '$INDEXLIFE')
  elseif now ~= last then
    redis.call('HSET', idx, 't', int(now))
  end
end
-- tight returns the tighter of two limits, where 0 is no limit.
local function tight(a, b)
  if a == 0 then return b end
  if b == 0 then return a end
  return math.min(a, b)
end
-- takenAt returns when to count a take so that it leaves a sliding window
-- of n buckets no sooner than leaves (0: a whole span from now), within the
-- window and no later than now: keypool's takenAt, in milliseconds.
local function takenAt(now, leaves, span, width, n, exact)
  if leaves == 0 then return now end
  local earliest = (math.floor(now / width) - n + 2) * width
  if exact then earliest = now - span + 1 end
  return math.min(math.max(leaves - span, earliest), now)
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
    if name ~= over and entry(kv[j + 1]) <= now then
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
  if add and redis.call('HSETNX', idx, 'm' .. m, '0') == 1 then
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
  for j = 1, #kv, 2 do
    if kv[j] == 'e' then w.exact = true end
  end
  local stale = {}
  if w.exact then
    -- Exact mode (keypool's window_exact.go): slot s holds a request's
    -- time in r<s> (Unix milliseconds) and its tokens in t<s>.
    local span = (n - 1) * width + GUARD
    w.es = {}
    local toks = {}
    for j = 1, #kv, 2 do
      local f, v = kv[j], tonumber(kv[j + 1]) or 0
      local slot = tonumber(string.sub(f, 2))
      if f == 'x' then
        w.x = v
      elseif slot and string.sub(f, 1, 1) == 'r' then
        w.es[slot] = {ms = v, tok = 0}
      elseif slot and string.sub(f, 1, 1) == 't' then
        toks[slot] = v
      end
    end
    for slot, e in pairs(w.es) do
      e.tok = toks[slot] or 0
      if e.ms + span <= now then
        w.es[slot] = nil
        stale[#stale + 1] = 'r' .. slot
        stale[#stale + 1] = 't' .. slot
      else
        w.sr, w.st = w.sr + 1, w.st + e.tok
      end
    end
    if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
    return w
  end
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
-- exactSet writes slot s of an exact window: entry e, or none.
local function exactSet(w, s, e)
  w.es[s] = e
  if e then
    redis.call('HSET', w.key, 'r' .. s, int(e.ms), 't' .. s, int(e.tok))
  else
    redis.call('HDEL', w.key, 'r' .. s, 't' .. s)
  end
end
-- exactTouch keeps an exact window's mark and sets its expiry again once
-- REFRESH old.
local function exactTouch(w)
  if w.now - w.x >= REFRESH then
    redis.call('HSET', w.key, 'e', '1', 'x', int(w.now))
    redis.call('PEXPIRE', w.key, int(w.n * w.width + MARGIN))
    w.x = w.now
  end
end
-- exactLatest returns the slot of the latest entry (the first of equals).
local function exactLatest(w)
  local j
  for s = 1, w.n do
    local e = w.es[s]
    if e and (not j or e.ms > w.es[j].ms) then j = s end
  end
  return j
end
-- exactInsert adds an entry at ms with tok tokens in the first free slot;
-- with none free, the oldest gives way, its tokens to the latest entry when
-- it still counted (keypool's insert).
local function exactInsert(w, ms, tok)
  local span = (w.n - 1) * w.width + GUARD
  local free, oldest
  for s = 1, w.n do
    local e = w.es[s]
    if not e then
      free = s
      break
    end
    if not oldest or e.ms < w.es[oldest].ms then oldest = s end
  end
  if not free then
    local carried = w.es[oldest].tok
    if w.es[oldest].ms + span <= ms then carried = 0 end
    w.es[oldest] = nil
    free = oldest
    local j = exactLatest(w)
    if j and w.es[j].ms >= ms then
      exactSet(w, j, {ms = w.es[j].ms, tok = math.min(w.es[j].tok + carried, MAXB)})
    else
      tok = tok + carried
    end
  end
  exactSet(w, free, {ms = ms, tok = math.min(math.max(tok, 0), MAXB)})
end
-- exactFind returns the first slot of an entry at ms, or nil.
local function exactFind(w, ms)
  for s = 1, w.n do
    local e = w.es[s]
    if e and e.ms == ms then return s end
  end
end
-- exactAdd is keypool's addExact: a take (req > 0) adds entries at at, a
-- settle (req 0) changes the tokens of the entry at at, a release (req < 0)
-- frees it.
local function exactAdd(w, at, req, tok)
  if req > 0 then
    for _ = 1, req do exactInsert(w, at, 0) end
  end
  local s = exactFind(w, at)
  if s and req < 0 then
    exactSet(w, s, nil)
  elseif s then
    exactSet(w, s, {ms = at, tok = math.min(math.max(w.es[s].tok + tok, 0), MAXB)})
  end
  exactTouch(w)
end
-- exactOrder returns the slots of the window's entries, oldest first.
local function exactOrder(w)
  local list = {}
  for s = 1, w.n do
    if w.es[s] then list[#list + 1] = s end
  end
  table.sort(list, function(a, b)
    if w.es[a].ms ~= w.es[b].ms then return w.es[a].ms < w.es[b].ms end
    return a < b
  end)
  return list
end
-- windowUse puts a loaded window in exact mode or bucket mode, converting
-- what it holds as keypool's use does.
local function windowUse(w, exact)
  if (w.exact or false) == exact then return end
  redis.call('DEL', w.key)
  if exact then
    local r, t = w.r, w.t
    w.exact, w.es, w.x = true, {}, 0
    for j = 1, w.n do
      local last = math.min((w.base + j + 1) * w.width, w.now)
      local req, tk = r[j] or 0, t[j] or 0
      local reqs = math.min(req, w.n)
      for k = 1, reqs do
        local tt = 0
        if k == reqs then tt = tk end
        exactInsert(w, last, tt)
      end
      if req == 0 and tk ~= 0 then exactInsert(w, last, tk) end
    end
    exactTouch(w)
    local span = (w.n - 1) * w.width + GUARD
    w.sr, w.st = 0, 0
    for _, e in pairs(w.es) do
      if e.ms + span > w.now then w.sr, w.st = w.sr + 1, w.st + e.tok end
    end
    return
  end
  local order = exactOrder(w)
  local es = w.es
  w.exact, w.es, w.r, w.t, w.sr, w.st, w.x = false, nil, {}, {}, 0, 0, w.now
  local fields = {}
  for _, s in ipairs(order) do
    local i = math.floor(es[s].ms / w.width)
    if i > w.base and i <= w.head then
      local j = i - w.base
      w.r[j] = math.min((w.r[j] or 0) + 1, MAXB)
      w.t[j] = math.min((w.t[j] or 0) + es[s].tok, MAXB)
    end
  end
  for j = 1, w.n do
    if w.r[j] or w.t[j] then
      w.sr, w.st = w.sr + (w.r[j] or 0), w.st + (w.t[j] or 0)
      local i = int(w.base + j)
      fields[#fields + 1] = 'r' .. i
      fields[#fields + 1] = int(w.r[j] or 0)
      fields[#fields + 1] = 't' .. i
      fields[#fields + 1] = int(w.t[j] or 0)
    end
  end
  fields[#fields + 1] = 'x'
  fields[#fields + 1] = int(w.now)
  redis.call('HSET', w.key, unpack(fields))
  redis.call('PEXPIRE', w.key, int(w.n * w.width + MARGIN))
end
local function fits(w, lr, lt, tok, fr, ft)
  return (lr == 0 or w.sr - fr + 1 <= lr) and (lt == 0 or w.st - ft + tok <= lt)
end
-- slidingRoom reports whether one more request of tok tokens fits, and if
-- not when it will: when the oldest buckets that make room leave.
local function slidingRoom(w, lr, lt, tok)
  if fits(w, lr, lt, tok, 0, 0) then return true, 0 end
  if w.exact then
    local span = (w.n - 1) * w.width + GUARD
    local fr, ft, last = 0, 0, w.now
    for _, s in ipairs(exactOrder(w)) do
      local e = w.es[s]
      fr, ft, last = fr + 1, ft + e.tok, e.ms
      if fits(w, lr, lt, tok, fr, ft) then return false, e.ms + span end
    end
    return false, last + span
  end
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
  if w.exact then
    exactAdd(w, w.now, req, tok)
    return
  end
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
  if redis.call('HEXISTS', key, 'e') == 1 then
    exactAdd(sliding(key, width, n, now), at, req, tok)
    return
  end
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
-- raiseAt counts req requests and tok tokens a vendor counted beyond a
-- loaded window as taken at at (keypool's raiseAt).
local function raiseAt(w, at, req, tok)
  if w.exact and w.sr == 0 and (req > 0 or tok > 0) then
    windowUse(w, false) -- an exact window that holds nothing is an empty one of buckets
  end
  if not w.exact then
    if req > 0 or tok > 0 then bucketAdd(w.key, w.width, w.n, w.now, at, req, tok) end
    return
  end
  if req > 0 then
    exactAdd(w, at, req, tok)
    return
  end
  if tok <= 0 then return end
  local j = exactLatest(w)
  if j and w.es[j].ms >= at then
    exactSet(w, j, {ms = w.es[j].ms, tok = math.min(w.es[j].tok + tok, MAXB)})
    exactTouch(w)
    return
  end
  exactAdd(w, at, 1, tok)
end
-- spendLoad loads a spend hash — what a key or an account spent, in
-- millionths of a dollar, in a calendar day (ds, de, d) and month (ms, me,
-- m), what requests in flight reserve of them (dh, mh), and how often it
-- was reset (g) — given the day and month the client placed at its
-- estimate of the server's time and the ends of the next ones; a period
-- that has ended gives way to the one of them that holds now (from now,
-- when the estimate was late), and one that began after now — the clock
-- put back — carries what it counts into it.
local function spendLoad(key, now, ds, de, de2, ms, me, me2)
  local v = redis.call('HMGET', key, 'ds', 'de', 'd', 'ms', 'me', 'm', 'dh', 'mh', 'g')
  local s = {key = key, ds = tonumber(v[1]), de = tonumber(v[2]), d = tonumber(v[3]) or 0,
    ms = tonumber(v[4]), me = tonumber(v[5]), m = tonumber(v[6]) or 0,
    dh = tonumber(v[7]) or 0, mh = tonumber(v[8]) or 0, g = tonumber(v[9]) or 0}
  if not s.de or now >= s.de then
    if now >= de then ds, de = de, de2 end
    s.ds, s.de, s.d, s.dh = math.min(ds, now), de, 0, 0
  elseif now < s.ds then
    -- The clock was put back before the day began: what it spent still
    -- counts, in the day that holds now (as calendar does).
    if now >= de then ds, de = de, de2 end
    s.ds, s.de = math.min(ds, now), de
  end
  if not s.me or now >= s.me then
    if now >= me then ms, me = me, me2 end
    s.ms, s.me, s.m, s.mh = math.min(ms, now), me, 0, 0
  elseif now < s.ms then
    if now >= me then ms, me = me, me2 end
    s.ms, s.me = math.min(ms, now), me
  end
  return s
end
-- spendRoom reports whether cost fits what is left of the day's and the
-- month's caps (0: none) after what requests in flight reserve, and if not
-- when it could: the end of the later period that is spent (spent), or,
-- when only reservations fill them, RESERVED after now.
local function spendRoom(s, cost, dcap, mcap, now)
  local ok, at, spent = true, 0, false
  local function check(x, h, cap, e)
    if cap <= 0 or x + h + cost <= cap then return end
    if x + cost > cap then
      ok, spent, at = false, true, math.max(at, e)
    elseif not spent then
      ok, at = false, now + $RESERVED
    end
  end
  check(s.d, s.dh, dcap, s.de)
  check(s.m, s.mh, mcap, s.me)
  return ok, at, spent
end
-- spendLeft returns what is left of the day's and the month's caps (0:
-- none) after what was spent and what requests in flight reserve, the less
-- of the two.
local function spendLeft(s, dcap, mcap)
  local left = $MAXEXACT
  if dcap > 0 then left = math.min(left, dcap - s.d - s.dh) end
  if mcap > 0 then left = math.min(left, mcap - s.m - s.mh) end
  return math.max(left, 0)
end
-- spendAdd counts cost as spent and held as reserved at time at, in the
-- periods that hold at, never below zero; the hash lives until its month
-- ends, and a margin.
local function spendAdd(s, at, cost, held, now)
  if not s.de then return end
  if at >= s.ds and at < s.de then s.d, s.dh = math.max(s.d + cost, 0), math.max(s.dh + held, 0) end
  if at >= s.ms and at < s.me then s.m, s.mh = math.max(s.m + cost, 0), math.max(s.mh + held, 0) end
  redis.call('HSET', s.key, 'ds', int(s.ds), 'de', int(s.de), 'd', int(s.d), 'ms', int(s.ms), 'me', int(s.me), 'm', int(s.m),
    'dh', int(s.dh), 'mh', int(s.mh))
  redis.call('PEXPIRE', s.key, int(math.max(s.me - now, 0) + MARGIN))
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
  elseif s and now < c.s then
    -- The clock was put back before the day began: what it counts still
    -- counts, in the day that holds now (keypool's fixed.shiftBack).
    if now >= e then s, e = e, e2 end
    c.s, c.e, c.life = math.min(s, now), e, e - now + MARGIN
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
// KEYS: the index of the key (or of its account), its benches, the model's
// minute and day windows, the overflow model's minute and day windows, the
// cap's minute and day windows, the key's own benches (the same as the
// second without an account), the key's spend and its account's spend, the
// key's own index (the same as the first without an account). The day keys
// name calendar or sliding windows as ARGV says.
//
// ARGV, after the op: model, overflow model, max models, tokens, RPM, TPM, RPD, TPD, cap
// RPM, cap TPM, cap RPD, cap TPD, for calendar days the day's start and end
// and the next day's end (0 0 0 for sliding days), 1 for a named model (0
// otherwise), the cost, the key's and the account's day and month budgets
// (0: none; millionths of a dollar), and the budgets' day's start, end and
// next end, and month's start, end and next end, placed at the client's
// estimate of the server's time; spend counts by the server's. The limits
// enforced are, axis by axis, the tighter of these and those the model's
// entry learned.
//
// ARGV[28] is 1 for an unbounded take (keypool.Claim.Unbounded), which
// reserves all that is left of each budget it counts in, else 0. ARGV[29]
// is 1 for a take sent again after a {2, server} answer, which takes the
// days and months as they are.
//
// It returns {1, at, 0, level, counted, tokens, keyHeld, accountHeld,
// keyResets, accountResets, server} for a take it recorded at server time
// at — counted says what counts it: 1 the model's minute, 2 its day, 4 the
// cap's minute, 8 the cap's day, 16 the key's spend, 32 the account's, and
// 64 says the model's windows are the overflow model's —
// with what it reserves of the key's and the account's spend, and their
// resets as of the take; and {0, retryAt, reason, level, now, server} for
// one it refused at server time now: reason is the kind of the bench that
// holds the key, or reasonMinute (a minute window, or a budget that
// requests in flight reserve) or reasonDay (a day window or a spent
// budget). server, last, is the server's own time, not held back to the
// key's latest take, by which the client places days. A take whose days or
// months do not hold the server's time records nothing and answers {2,
// server}; the client sends it once more, with ARGV[29] 1.
const takeSource = `
ops.take = function()
local idx = KEYS[1]
local now, known, x, raw = key(idx, ARGV[1])
local server = servertime() -- not held back to the key's latest take
if ARGV[29] ~= '1' then
  -- Days and months placed where the server's time is not: the client
  -- asks again at the server's time it answers.
  local function off(s, e2) return s ~= 0 and (now < s or now >= e2) end
  local budgeted = ARGV[18] ~= '0' or ARGV[19] ~= '0' or ARGV[20] ~= '0' or ARGV[21] ~= '0'
  if off(tonumber(ARGV[13]), tonumber(ARGV[15])) or (budgeted and (off(tonumber(ARGV[22]), tonumber(ARGV[24]))
    or off(tonumber(ARGV[25]), tonumber(ARGV[27])))) then
    return {2, server}
  end
end
local m = model(idx, KEYS[2], ARGV[1], known, ARGV[2], tonumber(ARGV[3]), true, now, ARGV[16] == '1')
local mk, dk = KEYS[3], KEYS[4]
if m == ARGV[2] then
  mk, dk = KEYS[5], KEYS[6]
  raw = redis.call('HGET', idx, 'm' .. m)
end
local busy, lrn = entry(raw)
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
if KEYS[9] ~= KEYS[2] then
  -- The key's own index, under its account's: its clock, for its benches.
  local onow, _, ox, _, olast = key(KEYS[12], ARGV[1])
  seen(KEYS[12], onow, olast, ox)
  local kkind, kends = bench(redis.call('HGET', KEYS[9], '*'))
  if kends > ends then kind, ends = kkind, kends end
end
if ends > now then return {0, ends, kind, level, now, server} end

local lr, lt = tight(tonumber(ARGV[5]), lrn[1]), tight(tonumber(ARGV[6]), lrn[3])
local dr, dt = tight(tonumber(ARGV[7]), lrn[2]), tight(tonumber(ARGV[8]), lrn[4])
local clr, clt, cdr, cdt = tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11]), tonumber(ARGV[12])
local tok = tonumber(ARGV[4])
local cap = tight(tight(lt, dt), tight(clt, cdt))
if cap > 0 then tok = math.min(tok, cap) end
local function load(minute, day, r1, t1, r2, t2)
  local s = {lr = r1, lt = t1, dr = r2, dt = t2}
  if s.lr ~= 0 or s.lt ~= 0 then
    s.minute = sliding(minute, MW, MN, now)
    windowUse(s.minute, s.lr > 0 and s.lr <= MN)
  end
  if s.dr ~= 0 or s.dt ~= 0 then
    if mode == 'c' then
      s.cal = calendar(day, now, cs, ce, ce2)
    else
      s.day = sliding(day, DW, DN, now)
      windowUse(s.day, s.dr > 0 and s.dr <= DN)
    end
  end
  return s
end
local sets = {load(mk, dk, lr, lt, dr, dt), load(KEYS[7], KEYS[8], clr, clt, cdr, cdt)}
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
-- Spend counts by the server's clock, in the client's calendar periods.
local cost = tonumber(ARGV[17])
local budgets = {{key = KEYS[10], d = tonumber(ARGV[18]), m = tonumber(ARGV[19]), bit = 16},
  {key = KEYS[11], d = tonumber(ARGV[20]), m = tonumber(ARGV[21]), bit = 32}}
local spentOut = false
for _, b in ipairs(budgets) do
  if b.d > 0 or b.m > 0 then
    b.s = spendLoad(b.key, now, tonumber(ARGV[22]), tonumber(ARGV[23]), tonumber(ARGV[24]),
      tonumber(ARGV[25]), tonumber(ARGV[26]), tonumber(ARGV[27]))
    local fit, at, spent = spendRoom(b.s, cost, b.d, b.m, now)
    if not fit then ok, retry = false, math.max(retry, at) end
    spentOut = spentOut or spent
  end
end
if spentOut then reason = reasonDay end
if not ok then return {0, retry, reason, level, now, server} end
local counted, bit = 0, 1
for _, s in ipairs(sets) do
  if s.minute then slidingAdd(s.minute, 1, tok); counted = counted + bit end
  if s.day then slidingAdd(s.day, 1, tok) end
  if s.cal then calendarAdd(s.cal, now, 1, tok) end
  if s.day or s.cal then counted = counted + 2 * bit end
  bit = 4
end
local held = {0, 0}
for i, b in ipairs(budgets) do
  if b.s then
    held[i] = cost
    if ARGV[28] == '1' then held[i] = math.max(cost, spendLeft(b.s, b.d, b.m)) end
    spendAdd(b.s, now, 0, held[i], now)
    counted = counted + b.bit
  end
end
-- The entry holds the take for as long as its windows count it; a take
-- needs the field written again only once that moment has moved on by
-- REFRESH.
local hold = now
if sets[1].minute then hold = now + MW * MN end
if sets[1].day or sets[1].cal then hold = now + DW * DN end
if m ~= ARGV[2] and hold - busy > REFRESH then redis.call('HSET', idx, 'm' .. m, entryString(hold, lrn)) end
local function resets(b) if b.s then return b.s.g end return 0 end
if m == ARGV[2] then counted = counted + 64 end
return {1, now, 0, level, counted, tok, held[1], held[2], resets(budgets[1]), resets(budgets[2]), server}
end
`

// learnSource is the op "learn": it records what a vendor stated of a
// model's windows — the limits it enforces, replacing those learned before
// axis by axis, and how much of each window it counts, raising a window that
// counts less (keypool's windows.raise).
//
// KEYS: the index of the key (or of its account), its benches, the model's
// minute and day windows, the overflow model's minute and day windows.
//
// ARGV, after the op: model, overflow model, max models, the stated RPM,
// RPD, TPM, TPD (0: not stated), the counted RPM, RPD, TPM, TPD (-1: not
// stated), when the minute's and the day's counts leave (Unix milliseconds,
// 0: a whole window from now), and for calendar days the day's start and
// end and the next day's end (0 0 0 for sliding days).
const learnSource = `
ops.learn = function()
local idx = KEYS[1]
local now, known, x, _, last = key(idx, ARGV[1])
seen(idx, now, last, x)
local m = model(idx, KEYS[2], ARGV[1], known, ARGV[2], tonumber(ARGV[3]), true, now, false)
local mk, dk = KEYS[3], KEYS[4]
if m == ARGV[2] then mk, dk = KEYS[5], KEYS[6] end
local busy, lrn = entry(redis.call('HGET', idx, 'm' .. m))
for i = 1, 4 do
  local v = tonumber(ARGV[3 + i])
  if v > 0 then lrn[i] = v end
end
local ur, ud, ut, utd = tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10]), tonumber(ARGV[11])
local function above(vendor, window) return math.max(vendor - window, 0) end
if ur >= 0 or ut >= 0 then
  local w = sliding(mk, MW, MN, now)
  local r, t = above(ur, w.sr), above(ut, w.st)
  raiseAt(w, takenAt(now, tonumber(ARGV[12]), MW * (MN - 1), MW, MN, w.exact), r, t)
  busy = math.max(busy, now + MW * MN)
end
if ud >= 0 or utd >= 0 then
  local cs = tonumber(ARGV[14])
  if cs ~= 0 then
    local c = calendar(dk, now, cs, tonumber(ARGV[15]), tonumber(ARGV[16]))
    local r, t = above(ud, c.r), above(utd, c.t)
    if r > 0 or t > 0 then calendarAdd(c, now, r, t) end
  else
    local w = sliding(dk, DW, DN, now)
    local r, t = above(ud, w.sr), above(utd, w.st)
    raiseAt(w, takenAt(now, tonumber(ARGV[13]), DW * (DN - 1), DW, DN, w.exact), r, t)
  end
  busy = math.max(busy, now + DW * DN)
end
redis.call('HSET', idx, 'm' .. m, entryString(busy, lrn))
return 1
end
`

// adjustSource is the op "adjust": it changes what a recorded take counts: a settle's tokens, or a
// release's request and tokens, in the windows the take counted in, if the
// bucket (or the calendar day) of the take is still in them.
//
// KEYS: as the take script's, without the benches; then the key's spend and
// its account's.
//
// ARGV, after the op: model, at (the take's server time), requests, tokens, and 1 or 0 for
// each of: the model's minute window, its day window, the cap's minute
// window, the cap's day window, calendar days; then the cost spent, 1 or 0
// for each of the key's and the account's spend (which counts it at at), and
// for each of the key's and the account's spend the change of what the take
// reserves and the spend's resets as of the take: a spend reset since holds
// nothing of the take's; last, 1 when the take counted in the overflow
// model's windows (0 otherwise).
const adjustSource = `
ops.adjust = function()
local idx = KEYS[1]
local now = key(idx, ARGV[1])
local mk, dk = KEYS[2], KEYS[3]
-- The windows the take counted in: the overflow model's when it did, even
-- if the model has had an entry of its own made since.
if ARGV[17] == '1' then mk, dk = KEYS[4], KEYS[5] end
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
local cost = tonumber(ARGV[10]) or 0
for i, f in ipairs({ARGV[11], ARGV[12]}) do
  local held, g = tonumber(ARGV[11 + 2 * i]) or 0, tonumber(ARGV[12 + 2 * i]) or 0
  if f == '1' and (cost ~= 0 or held ~= 0) then
    local v = redis.call('HMGET', KEYS[7 + i], 'ds', 'de', 'd', 'ms', 'me', 'm', 'dh', 'mh', 'g')
    local s = {key = KEYS[7 + i], ds = tonumber(v[1]), de = tonumber(v[2]), d = tonumber(v[3]) or 0,
      ms = tonumber(v[4]), me = tonumber(v[5]), m = tonumber(v[6]) or 0,
      dh = tonumber(v[7]) or 0, mh = tonumber(v[8]) or 0}
    if (tonumber(v[9]) or 0) ~= g then held = 0 end
    -- A take recorded before the clock was put back (after now) whose day
    -- a take since carried back (spendLoad) settles in the day that holds
    -- now, where what it reserved went.
    local sat = at
    if at > now and s.de and (at < s.ds or at >= s.de) then sat = now end
    spendAdd(s, sat, cost, held, sat)
  end
end
return 1
end
`

// benchSource is the op "bench": it sets a key aside, never for less time than a bench already
// set; it records the level for the model. The benches' hash lives until a
// day after its latest bench ends, and its expiry only ever extends.
//
// KEYS: the key's index, its benches.
//
// ARGV, after the op: model, overflow model, max models, 1 for all models, kind, how
// long the bench lasts from the server's time (milliseconds), level.
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
local ends = now + tonumber(ARGV[6])
if ends > cur then redis.call('HSET', KEYS[2], f, ARGV[5] .. ':' .. int(ends)) end
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

// forgetSource is the op "forget": it lifts what a key's answers set — its
// benches and levels, what its windows count, the limits its models
// learned — keeping when each model's windows were last used.
//
// KEYS: the key's index, its benches, then every window to empty: the
// cap's, and each model's.
const forgetSource = `
ops.forget = function()
for i = 2, #KEYS do redis.call('DEL', KEYS[i]) end
local kv = redis.call('HGETALL', KEYS[1])
for j = 1, #kv, 2 do
  if string.sub(kv[j], 1, 1) == 'm' then
    redis.call('HSET', KEYS[1], kv[j], entryString(entry(kv[j + 1]), {0, 0, 0, 0}))
  end
end
return 1
end
`

// resetSpendSource is the op "resetspend": it forgets what a key (or an
// account) spent and what its requests in flight reserve, and counts the
// reset, so that a reservation taken before gives back nothing it held.
//
// KEYS: the spend hash.
const resetSpendSource = `
ops.resetspend = function()
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'd', '0', 'm', '0', 'dh', '0', 'mh', '0')
redis.call('HINCRBY', KEYS[1], 'g', 1)
return 1
end
`

// dispatch runs the op ARGV[1] names with the rest of ARGV. A take and an
// adjust change counts, so each runs once: its last KEYS entry is a key of
// its own (the call's ID), which keeps its answer for ONCELIFE ms; a call
// run again — go-redis retries a script whose answer it did not read in
// time, on another connection — answers the same and changes nothing.
//
// The op "batch" runs several calls in one: ARGV, after the op, holds the
// number of calls, each call's number of keys and of arguments, then the
// calls' arguments, op first, in order; KEYS their keys, in order. It
// answers each call's answer, in order, or the error a call met as an
// error reply in its place: a call that fails — a key of the wrong type —
// fails alone. Every call of a batch names keys of one pool, in one slot.
const dispatch = `
local function runOp()
  local op = table.remove(ARGV, 1)
  if op ~= 'take' and op ~= 'adjust' then return ops[op]() end
  local once = KEYS[#KEYS]
  local kept = redis.call('GET', once)
  if kept then
    local r = {}
    for n in string.gmatch(kept, '[^,]+') do r[#r + 1] = tonumber(n) end
    if #r == 1 and op == 'adjust' then return r[1] end
    return r
  end
  local r = ops[op]()
  local v = r
  if type(r) == 'table' then
    local parts = {}
    for i, n in ipairs(r) do parts[i] = int(n) end
    v = table.concat(parts, ',')
  else
    v = int(r)
  end
  redis.call('SET', once, v, 'PX', '$ONCELIFE')
  return r
end
if ARGV[1] ~= 'batch' then return runOp() end
local keys, args = {}, {}
for i = 1, #KEYS do keys[i] = KEYS[i] end
for i = 1, #ARGV do args[i] = ARGV[i] end
local n = tonumber(args[2])
local ki, ai, out = 0, 2 + 2 * n, {}
for c = 1, n do
  local nk, na = tonumber(args[1 + 2 * c]), tonumber(args[2 + 2 * c])
  for i = #KEYS, 1, -1 do KEYS[i] = nil end
  for i = #ARGV, 1, -1 do ARGV[i] = nil end
  for i = 1, nk do KEYS[i] = keys[ki + i] end
  for i = 1, na do ARGV[i] = args[ai + i] end
  ki, ai = ki + nk, ai + na
  local ok, r = pcall(runOp)
  if not ok then
    if type(r) == 'table' then r = r.err end
    r = redis.error_reply(tostring(r))
  end
  out[c] = r
end
return out
`

// serverTime is the Lua function that reads the time the scripts count
// by: the Redis server's, in milliseconds.
const serverTime = `local function servertime()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end`

// storeScript is the store's one Lua script: every call names an op, so
// that every call of a pipeline is known to Redis, or none is (after a
// restart, a failover or SCRIPT FLUSH), and a pipeline re-sent by EVAL keeps
// its order.
var storeScript = newScript(serverTime)

// newScript returns the store's script with clock, the Lua that defines
// servertime.
func newScript(clock string) *redis.Script {
	r := strings.NewReplacer(
		"$SERVERTIME", clock,
		"$MN", strconv.Itoa(minuteBuckets),
		"$MW", strconv.FormatInt(minuteWidth, 10),
		"$DN", strconv.Itoa(dayBuckets),
		"$DW", strconv.FormatInt(dayWidth, 10),
		"$MAXB", strconv.FormatInt(maxBucket, 10),
		"$MARGIN", strconv.FormatInt(windowMargin, 10),
		"$GUARD", strconv.FormatInt(int64(windowspec.ExactGuard/time.Millisecond), 10),
		"$MAXSTEP", strconv.FormatInt(int64(windowspec.MaxStepBack/time.Millisecond), 10),
		"$REFRESH", strconv.FormatInt(expiryRefresh, 10),
		"$INDEXLIFE", strconv.FormatInt(indexLife, 10),
		"$LEVELLIFE", strconv.FormatInt(levelLife, 10),
		"$EVICTSCAN", strconv.Itoa(evictScan),
		"$OVER", luaString(overflowModel),
		"$MAXEXACT", strconv.FormatInt(maxExact, 10),
		"$RESERVED", strconv.FormatInt(int64(windowspec.ReservedRetry/time.Millisecond), 10),
		"$ONCELIFE", strconv.FormatInt(onceLife, 10),
		"reasonMinute", strconv.Itoa(reasonMinute),
		"reasonDay", strconv.Itoa(reasonDay),
	)
	return redis.NewScript(r.Replace(prelude + "local ops = {}\n" +
		takeSource + learnSource + adjustSource + benchSource + resetLevelSource + forgetSource + resetSpendSource + dispatch))
}

// luaString returns s as a Lua 5.1 string literal: every byte outside
// printable ASCII, and the quote and the backslash, as a three-digit
// decimal escape, which no digit after it extends.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c >= 0x7f || c == '"' || c == '\\' {
			fmt.Fprintf(&b, "\\%03d", c)
			continue
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}
