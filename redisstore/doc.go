// Package redisstore is a keypool.Store kept in Redis, so that the pools of
// several processes — the replicas of a service behind a load balancer —
// see each other's use of the same keys, and together keep each key within
// its limits. It is a package of its own so that keypool never imports
// go-redis.
//
//	s, err := redisstore.Open("redis://localhost:6379/0")
//	// or, for a Redis Cluster, its nodes:
//	// redisstore.Open("redis://node-1:7000?addr=node-2:7000&addr=node-3:7000")
//	…
//	defer s.Close()
//	pool, err := keypool.New("openai", keys, keypool.WithStore(s), keypool.WithLimits(limits))
//
// # One round trip per request
//
// A take — check every window and bench of a key, and record the request if
// all admit it — is one Lua script run by EVALSHA (by EVAL when Redis does
// not know it, after a restart, a failover or SCRIPT FLUSH), so two
// replicas never both take the last slot. The settle of a request's tokens,
// the release of a request that never reached the vendor, and the vendor's
// statement of its limits (Learn) are queued: the next take of the pool
// carries them in its own EVALSHA (the script's op batch, each call in it
// failing alone), or, once the oldest has waited 250 ms, the store's
// goroutine sends all that waits in one. A request is thus one round trip
// and one script call, with rate-limit headers on every answer: 1.00 to
// 1.05 EVALSHA a request, one request at a time or 32 at once
// (TestEvalshaPerRequest). Until an adjustment is sent, the windows count
// the request's estimate. Flush, State
// and Close send what waits, and a take or a state that comes while the
// store's goroutine sends waits for that send: a caller reads what it
// wrote.
//
// The windows are keypool's: sliding windows of 81 buckets of 0.75 s for a
// minute and 25 of an hour for a day, each counting until all of it has left
// the span — or, where the request limit is no more than the slots, each
// request's own time, so that a key is back the moment its oldest request
// leaves — or calendar days. A Redis store and a MemoryStore given the same
// requests at the same times answer the same.
//
// # The clock
//
// The time is the server's (TIME, in milliseconds), never the replicas',
// for windows, benches and spend alike: Take.Now and State's now only
// place calendar days and move the times the store answers. The replica
// computes, by the zone rules it holds, the calendar day and month that
// hold the server's time — its own clock moved by how far apart the latest
// take's answer showed the two — and the next ones' ends, and the script
// takes the one that holds the server's time; a take whose days hold it
// not (the server's clock was put right since) is sent once more, at the
// time the server answered. A bench lasts, from the
// server's time, as long as Bench.Until is after the replica's clock
// (WithClock, the pool's), rounded up to the millisecond; the times the
// store answers — a refused take's RetryAt, a bench's end in State — are
// the server's moved to the replica's clock. Replicas whose clocks are
// minutes apart thus bench a key for as long, see it back at the same
// moment, and count a day's spend in the same day.
//
// A server's clock put back by more than an hour — right after running
// ahead — moves what each key holds back with it, as the MemoryStore does
// with a pool's clock: what was taken counts for the rest of its window,
// a bench lasts the rest of its length. A step back of up to an hour is
// ridden out: the key counts at the latest time it has seen.
//
// # Layout
//
// Every key name is <prefix>:{<provider>}:<kind>:<key ID>[:<model>], with
// the prefix "keypool" by default (WithPrefix) and the provider, key ID and
// model escaped (':', '{', '}', '%', spaces, control and non-ASCII bytes as
// %XX), so that names never collide. The braces make the provider the hash
// tag (an empty provider is written "%", as "{}" is no hash tag): all the
// keys of a pool live in one slot, and a script may touch any of them on
// Redis Cluster. Secrets never reach Redis: keys are named by
// their IDs. Every key is a hash with an expiry, so that idle state
// disappears; a write sets the expiry again once it is 30 s old (not at
// every write, to save a command), which the expiry's margin of a minute
// covers:
//
//	i:<key>          index: t the latest take (ms), d "s" or "c" as days
//	                 count, x when the expiry was set, m<model> for each model
//	                 the key knows (at most 1024; more share "\x00other", as in
//	                 the MemoryStore); expires 48 h after the latest take
//	b:<key>          benches and levels: * the bench of the whole
//	                 key, b<model> a model's bench, as "<kind>:<end ms>";
//	                 l<model> its level; expires a day after the latest bench
//	                 ends, and its expiry only ever extends; Unbench deletes it
//	wm:<key>:<model> the sliding minute of a key and model: r<bucket> and
//	                 t<bucket>, the requests and tokens of each 0.75 s
//	                 bucket (bucket = Unix ms / 750), x when the expiry was
//	                 set; expires 60.75 s (a bucket's life) and 30 to 60 s
//	                 after the latest write
//	wd:<key>:<model> the sliding day: the same, in one-hour buckets; expires
//	                 25 h and 30 to 60 s after the latest write
//	wc:<key>:<model> the calendar day: s and e its bounds (ms), r and t its
//	                 counts; expires a minute after the day ends
//	cm:, cd:, cc:<key>  the same three windows for the key's cap across its
//	                 models
//	o:<call ID>      a string: the answer of a take or an adjustment, kept
//	                 30 s, so that the script run again — go-redis retries a
//	                 call whose answer it did not read in time — answers the
//	                 same and counts nothing twice
//
// A window exists only while a limit on its axis is set. Integers reach the
// scripts as strings and are written back with %d; limits above 2^53 are
// taken as 2^53.
//
// # When Redis does not answer
//
// Each call waits for Redis no longer than the store's timeout
// (WithTimeout, DefaultTimeout by default), so a Redis that pauses — a
// stalled host, a long command — is noticed within it. A call that gets
// no answer from Redis (the network, a timeout, a server
// loading, read-only or down) marks it down, and the store probes it every
// second until it answers — on a Cluster, the node of each pool's slot,
// with a probe started at each 200 ms read of the slot map, so that a
// failover's new master is heard within a read of the map that names it;
// WithStatusFunc is told of both changes. Meanwhile, by default, Take, Learn, Bench, Unbench and
// State fail at once with an error that matches ErrUnavailable and reads
// "redisstore: redis unavailable: …", so the pool fails each request with a
// clear error. New also fails when Redis does not answer.
//
// With WithLocalFallback(replicas), the store serves from windows in memory
// instead, with every limit divided by replicas (rounded down, at least 1),
// so that the replicas together stay within each limit; settles and
// releases of local grants stay local. Benches (levels too) and unbenches
// made during the outage apply locally at once, and are written to Redis,
// in order, when it answers again, so that the other replicas learn of
// them; Redis keeps the later of two benches, so a bench written late never
// shortens one set meanwhile, and each ends when it was meant to. The local
// windows know nothing of what Redis counted, and Redis never learns what
// they counted: across each switch the vendor may see up to one limit more
// within a window, and its 429s then bench the key. A replica that starts
// while Redis is down starts on local windows.
//
// Adjustments waiting when Redis stops answering are sent when it answers
// again (at most 16384 wait; older ones are dropped). Adjustments in a
// pipeline that failed are dropped, since it may have run them; both are
// reported to WithErrorFunc.
//
// # Running Redis for it
//
//   - Set maxmemory-policy to noeviction, or give the store a Redis of its
//     own: every key has an expiry, so the volatile-* and allkeys-* policies
//     may evict windows and benches, and the store then undercounts.
//   - Replication is asynchronous: after a failover, the latest takes and
//     benches may be lost, letting a little too much through for up to a
//     minute (a day for day limits). The vendor's 429s restore the benches.
//   - The scripts use TIME, HGETALL, HMGET, HSET, HDEL, HEXISTS, HLEN,
//     PEXPIRE and PTTL, and no library beyond Lua 5.1's base, string, table
//     and math: Redis 5 or later should serve (the tests run Redis 7.0 and
//     miniredis). Managed servers that refuse TIME in scripts do not.
//   - After a step back of the server's clock (see The clock), a key's
//     next call moves its windows and benches: keys of the pool's slot
//     that the call does not name, which Redis and Redis Cluster 7 allow
//     to scripts; servers that refuse it (Dragonfly by default) do not
//     serve. A key of another type there is left as it is.
//   - A take touches at most eight hashes. A busy minute window holds up to
//     163 fields, more than the default hash-max-listpack-entries (128), so
//     Redis keeps it as a plain hash: a few KiB a key and model.
package redisstore
