package redisstore

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keypool-go/keypool"
)

// The store's work off the request path.
const (
	// settleDelay is how long an adjustment waits for a take to carry it
	// before the store's goroutine sends it, with all that waits then: long
	// enough for a client that sends a few requests a second to carry each
	// answer's statement and settle in its next take, short beside the
	// minute the windows count.
	settleDelay = 250 * time.Millisecond
	// maxCarried bounds the adjustments one take carries.
	maxCarried = 64
	// maxSent bounds the adjustments of one pipeline sent alone.
	maxSent = 512
	// maxPending bounds the adjustments waiting; beyond it the oldest are
	// dropped.
	maxPending = 1 << 14
	// maxJournal bounds the changes of benches and levels kept for Redis
	// during an outage; beyond it the oldest are dropped.
	maxJournal = 4096
	// probeEvery is how often a Redis taken as down is asked whether it is
	// back.
	probeEvery = time.Second
	// slotWatch is how often, while Redis is taken as down, a store over
	// a Redis Cluster reloads the cluster's slot map and probes: a
	// failover's new master answers within a watch or two of its election,
	// not within up to two probeEvery (the probe before the election
	// fails, and so does the one after it that asks a slot map reloaded
	// before it).
	slotWatch = 200 * time.Millisecond
	// opTimeout bounds the PING of New and the last send of Close; every
	// other call is bounded by the store's timeout (WithTimeout).
	opTimeout = 5 * time.Second
)

// evalCall is one call of the store's script.
type evalCall struct {
	keys []string
	args []any // the op's name, then its arguments
	cmd  *redis.Cmd
}

// call returns a call of the store's script's op.
func call(op string, keys []string, args ...any) *evalCall {
	return &evalCall{keys: keys, args: append([]any{op}, args...)}
}

// once returns c as a call the script runs once however often Redis is
// sent it: its ID's key, in the same slot as the key base names, goes last
// in its keys (see dispatch).
func (s *Store) once(c *evalCall, n keyNames) *evalCall {
	c.keys = append(c.keys, n.base+"o:"+s.id+"-"+strconv.FormatUint(s.calls.Add(1), 36))
	return c
}

// runner returns a function that runs c by EVALSHA, or EVAL when Redis
// does not know the script.
func (s *Store) runner(c *evalCall) func(context.Context) error {
	return func(ctx context.Context) error {
		return s.cfg.script.Run(ctx, s.rdb, c.keys, s.args(c)...).Err()
	}
}

// args returns the script's arguments for c: its own, after the time to
// count by when the store has a clock of its own in place of the server's
// (the tests').
func (s *Store) args(c *evalCall) []any {
	if s.cfg.serverNow == nil {
		return c.args
	}
	return append([]any{s.cfg.serverNow().UnixMilli()}, c.args...)
}

// exec runs calls by EVALSHA — several as one call of the op batch, which
// Redis counts as one — and then the commands extra queues, all in one
// round trip. Each call's cmd holds its answer. The calls name keys of one
// pool, in one slot. When Redis does not know the script (after a restart,
// a failover or SCRIPT FLUSH), it runs the calls again by EVAL, which
// loads it, and then the commands of extra.
func (s *Store) exec(ctx context.Context, calls []*evalCall, extra func(redis.Pipeliner)) {
	var one *evalCall
	switch len(calls) {
	case 0:
	case 1:
		one = calls[0]
	default:
		one = batch(calls)
	}
	script := s.cfg.script
	switch {
	case extra == nil && one != nil:
		one.cmd = script.Run(ctx, s.rdb, one.keys, s.args(one)...)
	case extra != nil:
		pipe := s.rdb.Pipeline()
		if one != nil {
			one.cmd = script.EvalSha(ctx, pipe, one.keys, s.args(one)...)
		}
		extra(pipe)
		_, _ = pipe.Exec(ctx) // each command holds its own error
		if one != nil && redis.HasErrorPrefix(one.cmd.Err(), "NOSCRIPT") {
			one.cmd = script.Run(ctx, s.rdb, one.keys, s.args(one)...)
			_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				extra(p)
				return nil
			})
		}
	}
	if len(calls) > 1 {
		one.spread(ctx, calls)
	}
	if one != nil && !isUnavailable(one.cmd.Err()) { // an answer, an error of Redis's own too
		s.heard(one.keys[0])
	}
}

// maxProbes bounds the probes of a Cluster taken as down that wait for
// an answer at once: the store's timeout over slotWatch, and one.
const maxProbes = 4

// maxSlots bounds the pools whose slots the probes ask: a store serves a
// few pools (a proxy's routes), never many.
const maxSlots = 64

// heard records that Redis answered a call on key, of a pool whose slot
// the probes then ask.
func (s *Store) heard(key string) {
	s.answered.Store(time.Now().UnixNano())
	tag, _, ok := strings.Cut(key, "}")
	if !ok {
		return
	}
	if m := s.slots.Load(); m != nil && ((*m)[tag] != "" || len(*m) >= maxSlots) {
		return // the common call: a pool already known
	}
	s.slotsMu.Lock()
	defer s.slotsMu.Unlock()
	old := s.slots.Load()
	next := map[string]string{}
	if old != nil {
		if (*old)[tag] != "" || len(*old) >= maxSlots {
			return
		}
		maps.Copy(next, *old)
	}
	next[tag] = tag + "}:probe"
	s.slots.Store(&next)
}

// batch returns the call of the op batch that runs calls, in order (see
// dispatch).
func batch(calls []*evalCall) *evalCall {
	b := &evalCall{args: []any{"batch", len(calls)}}
	for _, c := range calls {
		b.keys = append(b.keys, c.keys...)
		b.args = append(b.args, len(c.keys), len(c.args))
	}
	for _, c := range calls {
		b.args = append(b.args, c.args...)
	}
	return b
}

// spread gives each of calls, run by the batch b, its answer: the batch's
// error when the batch failed, else its own answer or error.
func (b *evalCall) spread(ctx context.Context, calls []*evalCall) {
	v, err := b.cmd.Slice()
	if err == nil && len(v) != len(calls) {
		err = fmt.Errorf("a batch of %d calls answered %d", len(calls), len(v))
	}
	for i, c := range calls {
		c.cmd = redis.NewCmd(ctx)
		if err != nil {
			c.cmd.SetErr(err)
		} else if e, ok := v[i].(error); ok {
			c.cmd.SetErr(e)
		} else {
			c.cmd.SetVal(v[i])
		}
	}
}

// adjustment is a settle or a release not yet sent: it changes what a take
// recorded at server time at (Unix milliseconds) by requests and tokens —
// or, when call is set, a vendor's statement (Learn) to send as it is.
type adjustment struct {
	// provider names the pool, whose keys share one slot: a call carries
	// the adjustments of its own pool.
	provider string
	queued   time.Time // when it began to wait, by the process's clock
	call     *evalCall
	claim    keypool.Claim
	counted  int64 // the windows that count the take (the take script's answer)
	at       int64
	requests int64
	tokens   int64
	cost     int64 // spent, millionths of a dollar
	// held changes what the take reserves of the key's and the account's
	// spend, if not reset since resets.
	held, resets [2]int64
}

// adjustCall returns the adjust script's call for a.
func (s *Store) adjustCall(a adjustment) *evalCall {
	if a.call != nil {
		return a.call
	}
	t := a.claim
	n := s.scope(t.Provider, t.KeyID, t.Account)
	own := names(s.cfg.prefix, t.Provider, t.KeyID)
	cal := t.DayZone != nil
	return s.once(call("adjust",
		[]string{n.index(), n.minute(t.Model), n.dayOf(t.Model, cal),
			n.minute(overflowModel), n.dayOf(overflowModel, cal), n.capMinute(), n.capDayOf(cal),
			own.spend(), n.spend()},
		t.Model, a.at, a.requests, a.tokens,
		flag(a.counted&1 != 0), flag(a.counted&2 != 0), flag(a.counted&4 != 0), flag(a.counted&8 != 0), flag(cal),
		a.cost, flag(a.counted&16 != 0), flag(a.counted&32 != 0),
		a.held[0], a.resets[0], a.held[1], a.resets[1], flag(a.counted&64 != 0)), n)
}

func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

// queue adds an adjustment to those waiting, and wakes the store's
// goroutine to send it if no take carries it first.
func (s *Store) queue(a adjustment) {
	if a.call == nil && a.requests == 0 && a.tokens == 0 && a.cost == 0 && a.held == [2]int64{} {
		return
	}
	a.queued = time.Now()
	s.mu.Lock()
	report := false
	if len(s.pending) >= maxPending {
		s.pending = s.pending[1:]
		report, s.dropped = !s.dropped, true
	}
	s.pending = append(s.pending, a)
	s.mu.Unlock()
	if report {
		s.cfg.logger.Warn(fmt.Sprintf("redisstore: over %d adjustments of tokens wait for redis: dropping the oldest", maxPending))
	}
	s.poke()
}

// carry takes up to limit adjustments of provider's pool off those
// waiting, in order, and returns their calls, with room for one more.
func (s *Store) carry(limit int, provider string) []*evalCall {
	s.mu.Lock()
	var batch []adjustment
	kept := s.pending[:0]
	for _, a := range s.pending {
		if len(batch) < limit && a.provider == provider {
			batch = append(batch, a)
		} else {
			kept = append(kept, a)
		}
	}
	clear(s.pending[len(kept):])
	if s.pending = kept; len(s.pending) == 0 {
		s.pending, s.dropped = nil, false
	}
	s.mu.Unlock()
	calls := make([]*evalCall, 0, len(batch)+1)
	for _, a := range batch {
		calls = append(calls, s.adjustCall(a))
	}
	return calls
}

// checkCarried reports the adjustments among calls that failed: they are
// dropped, for a failed pipeline may have run them. It returns the error of
// the first.
func (s *Store) checkCarried(ctx context.Context, calls []*evalCall) error {
	failed := 0
	var first error
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			failed++
			if first == nil {
				first = err
			}
		}
	}
	if failed == 0 {
		return nil
	}
	err := s.fail(ctx, first)
	s.cfg.logger.Warn(fmt.Sprintf("redisstore: dropped %d adjustments of tokens", failed), "err", err)
	return err
}

// sendPending sends the adjustments waiting when it is called, a batch
// of one pool's at a time, each holding s.sends. It sends no more than those: calls that
// go on queueing adjustments as it sends would otherwise keep it sending
// each alone, a round trip more each, for as long as they come.
func (s *Store) sendPending(ctx context.Context) error {
	s.mu.Lock()
	left := len(s.pending)
	s.mu.Unlock()
	for left > 0 {
		s.sends.Lock()
		calls := s.carry(min(left, maxSent), s.nextPool())
		if len(calls) == 0 {
			s.sends.Unlock()
			return nil // carried by takes meanwhile
		}
		if hook := testHookSending.Load(); hook != nil {
			(*hook)()
		}
		s.exec(ctx, calls, nil)
		s.sends.Unlock()
		left -= len(calls)
		if err := s.checkCarried(ctx, calls); err != nil {
			return err
		}
	}
	return nil
}

// nextPool returns the pool of the oldest adjustment waiting, or "".
func (s *Store) nextPool() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return ""
	}
	return s.pending[0].provider
}

// testHookSending, when set by a test, runs as a send has carried its
// adjustments and before it sends them.
var testHookSending atomic.Pointer[func()]

// change makes a change of benches or levels in Redis. While Redis is
// down, with WithLocalFallback, it makes it in the local store and keeps it
// to make in Redis when Redis answers again; without, it returns the
// ErrUnavailable.
func (s *Store) change(ctx context.Context, remote func(context.Context) error, local func() error) error {
	err := s.unavailable()
	if err == nil {
		if err = remote(ctx); err == nil {
			return nil
		}
		err = s.fail(ctx, err)
	}
	if !s.fallback(err) {
		return err
	}
	if err := local(); err != nil {
		return err
	}
	if s.keep(remote) {
		return nil
	}
	// Redis answered again meanwhile.
	if err := remote(ctx); err != nil {
		if err = s.fail(ctx, err); !s.fallback(err) {
			return err
		}
		s.keep(remote)
	}
	return nil
}

// keep adds a change to the journal while Redis is down, and reports
// whether it did.
func (s *Store) keep(change func(context.Context) error) bool {
	s.mu.Lock()
	if s.down == nil {
		s.mu.Unlock()
		return false
	}
	report := len(s.journal) >= maxJournal
	if report {
		s.journal = s.journal[1:]
	}
	s.journal = append(s.journal, change)
	s.mu.Unlock()
	if report {
		s.cfg.logger.Warn(fmt.Sprintf("redisstore: over %d benches made during the outage: dropping the oldest", maxJournal))
	}
	return true
}

// unavailable returns ErrUnavailable, with its cause, while Redis is taken
// as down; else nil.
// Health returns nil while Redis answers and no key is passed over;
// otherwise why the store takes Redis as unavailable, until a probe finds
// it back, or which keys are passed over for a Redis key of the wrong
// type, until a take of each succeeds again. The pool reads it to tell
// OnStoreError.
func (s *Store) Health() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down != nil {
		return s.down
	}
	return s.corruption()
}

func (s *Store) unavailable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.down
}

// markDown takes Redis as down, for cause, until a probe finds it back,
// and returns the ErrUnavailable that says so. On a Cluster it asks the
// cluster again which node holds each slot — at each failed call or probe,
// not once an outage: a node that does not answer may be a master that
// died, and the first ask may come before the cluster has elected its
// replica (the Cluster client does not ask again on a network error).
func (s *Store) markDown(cause error) error {
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		c.ReloadState(context.Background()) // in the background
	}
	err := &unavailableError{cause}
	s.mu.Lock()
	was := s.down == nil
	s.down = err
	s.mu.Unlock()
	if was {
		s.poke()
		s.healthWatch.Go() // from a goroutine of the store's, as NotifyHealth says
	}
	return err
}

// NotifyHealth implements keypool.HealthNotifier: f hears when Redis is
// taken as down, and when it answers again.
func (s *Store) NotifyHealth(f func()) (remove func()) { return s.healthWatch.Add(f) }

// poke wakes the store's goroutine.
func (s *Store) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// run is the store's goroutine: it sends the adjustments no take carried;
// while Redis is down, probes it; and while Redis is up but quiet (no call
// answered for cfg.probeEvery), probes it too, so that an outage of an idle
// store is noticed within a probe and a timeout — reporting each change.
func (s *Store) run() {
	defer s.done.Done()
	beat := time.NewTicker(s.cfg.probeEvery)
	defer beat.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-beat.C:
			if s.unavailable() != nil || time.Since(time.Unix(0, s.answered.Load())) < s.cfg.probeEvery {
				continue
			}
			if err := s.probe(); err != nil {
				s.markDown(err) // pokes: the next turn recovers
			}
			continue
		}
		if err := s.unavailable(); err != nil {
			s.cfg.logger.Warn("redisstore: redis unavailable", "err", err)
			if !s.recover() {
				return
			}
			s.cfg.logger.Info("redisstore: redis answers again")
			continue
		}
		// Wait until the oldest adjustment has waited settleDelay: the
		// takes that come meanwhile carry what waits, and then nothing is
		// left to send.
		for due, ok := s.due(); ok; due, ok = s.due() {
			if d := time.Until(due); d > 0 {
				if !s.sleep(d) {
					return
				}
				continue
			}
			// Not s.ctx: Close lets a send finish rather than drop it.
			ctx, cancel := s.bound(context.Background())
			_ = s.sendPending(ctx) // reported by checkCarried
			cancel()
			break // a send that failed marked Redis down, and poked
		}
	}
}

// due returns when the oldest adjustment waiting is to be sent alone, and
// false when none waits.
func (s *Store) due() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return time.Time{}, false
	}
	return s.pending[0].queued.Add(settleDelay), true
}

// recover probes Redis every cfg.probeEvery until it answers, makes the
// changes kept during the outage, takes Redis as up and sends the
// adjustments waiting. It returns false if the store was closed first.
//
// On a Cluster a probe starts at each watch of the slot map (slotWatch)
// without waiting for the one before, which may wait the store's whole
// timeout on the dead master of a map read before the failover: the first
// probe of a map that names the new master ends the outage.
func (s *Store) recover() bool {
	answers := make(chan error, maxProbes)
	running := 0
	for {
		var err error
		if c, ok := s.rdb.(*redis.ClusterClient); ok && s.cfg.probeEvery > slotWatch {
			c.ReloadState(s.ctx) // in the background: the probe reads it
			if running < maxProbes {
				running++
				s.done.Add(1)
				go func() {
					defer s.done.Done()
					time.Sleep(slotWatch / 2) // for the reload
					answers <- s.probe()
				}()
			}
			t := time.NewTimer(slotWatch)
			select {
			case <-s.stop:
				t.Stop()
				return false
			case <-t.C:
				continue // no answer yet: the map is watched again
			case err = <-answers:
				t.Stop()
				running--
			}
		} else {
			if !s.sleep(s.cfg.probeEvery) {
				return false
			}
			err = s.probe()
		}
		if err == nil {
			ctx, cancel := context.WithTimeout(s.ctx, opTimeout)
			if err = s.replay(ctx); err == nil {
				_ = s.sendPending(ctx) // reported by checkCarried
			}
			cancel()
		}
		if err == nil {
			return true
		}
		s.markDown(err) // the latest cause
	}
}

// probe asks Redis whether it answers, within the store's timeout: the
// node of each pool's slot the store has served (any node answers a PING,
// even while the master of a pool's slot is dead), in one pipeline, or,
// before any, the server. An answer that is an error of Redis's own (a
// NOPERM of an ACL that refuses EXISTS) is an answer. The probe's answer
// is not a call's: a quiet store goes on probing each probeEvery.
func (s *Store) probe() error {
	ctx, cancel := s.bound(s.ctx)
	defer cancel()
	var keys []string
	if m := s.slots.Load(); m != nil {
		for _, k := range *m {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		if err := s.rdb.Ping(ctx).Err(); isUnavailable(err) {
			return err
		}
		return nil
	}
	cmds, _ := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Exists(ctx, k)
		}
		return nil
	})
	for _, c := range cmds {
		if err := c.Err(); isUnavailable(err) {
			return err
		}
	}
	return nil
}

// replay makes in Redis the changes kept during the outage, in order, and
// takes Redis as up once none is left. A change Redis refuses (rather than
// fails to answer) is reported and dropped: it would be refused again.
func (s *Store) replay(ctx context.Context) error {
	for {
		s.mu.Lock()
		batch := s.journal
		s.journal = nil
		if len(batch) == 0 {
			was := s.down != nil
			s.down = nil
			s.mu.Unlock()
			if was {
				s.healthWatch.Go()
			}
			return nil
		}
		s.mu.Unlock()
		for i, change := range batch {
			err := change(ctx)
			switch {
			case err == nil:
			case !isUnavailable(err):
				s.cfg.logger.Warn("redisstore: writing a bench made during the outage", "err", err)
			default:
				s.mu.Lock()
				s.journal = append(batch[i:], s.journal...)
				if over := len(s.journal) - maxJournal; over > 0 {
					s.journal = s.journal[over:]
				}
				s.mu.Unlock()
				return err
			}
		}
	}
}

// sleep waits d, and reports false if the store was closed first.
func (s *Store) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.stop:
		return false
	case <-t.C:
		return true
	}
}
