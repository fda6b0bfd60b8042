package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keypool-go/keypool/internal/notify"
	"github.com/keypool-go/keypool/internal/windowspec"

	"github.com/keypool-go/keypool"
)

// ErrUnavailable reports that Redis did not answer: the network, a timeout,
// a server that is loading, read-only or down. The store's errors for it
// read "redisstore: redis unavailable: …"; test for it with errors.Is.
var ErrUnavailable = errors.New("redis unavailable")

// unavailableError is ErrUnavailable with its cause.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string   { return "redisstore: redis unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// Store is a keypool.Store kept in Redis, so that the pools of several
// processes — replicas of a service — share each key's windows, benches and
// levels. See the package documentation for what it writes
// where. A Store is safe for concurrent use.
type Store struct {
	rdb   redis.UniversalClient
	owned bool // Close closes rdb
	cfg   config
	// local serves while Redis is down, with WithLocalFallback; else nil.
	local keypool.Store
	// disabled is what the store knows of the keys out of rotation.
	disabled disabledKeys

	// id names the store among those that share Redis, and calls counts
	// its calls that run once (see once).
	id    string
	calls atomic.Uint64
	// skew is the server's clock less the pool's, in milliseconds, as the
	// latest take's answer showed: calendar days and months are placed at
	// the server's time.
	skew atomic.Int64

	kick chan struct{} // wakes the store's goroutine
	stop chan struct{}
	// ctx bounds the probes of the store's goroutine; Close cancels it.
	ctx       context.Context
	cancel    context.CancelFunc
	done      sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
	// sends orders the sends of adjustments: sendPending holds it whole
	// from carrying to answer, and a call that carries adjustments with
	// its own holds it shared, so that a call begun after a send carried a
	// caller's settle or statement runs after that send, never beside it:
	// a caller reads what it wrote.
	sends sync.RWMutex

	healthWatch notify.Listeners // told when Redis goes down and comes back
	// answered is when a call last had Redis's answer, in Unix
	// nanoseconds: the heartbeat probes only a Redis that has been quiet.
	answered atomic.Int64
	// slots names, for each pool the store has served (by its hash tag), a
	// key under that tag: the heartbeat and the recovery probe ask the node
	// that holds each pool's slot, not just any node. Written seldom, read
	// at every call: a map replaced whole, never changed.
	slots   atomic.Pointer[map[string]string]
	slotsMu sync.Mutex // serializes the replacements of slots

	mu sync.Mutex // guards the fields below
	// corrupt holds, by provider and key ID, why a key's takes are passed
	// over: a Redis key of its holds the wrong type.
	corrupt map[keyRef]error
	// pending are the adjustments of settles and releases not yet sent.
	pending []adjustment
	// journal holds the changes of benches and levels made locally during
	// an outage, to make in Redis when it answers again.
	journal []func(context.Context) error
	// down is why Redis is taken as unavailable; nil while it answers.
	down error
	// dropped reports that an adjustment was dropped since the queue was
	// last empty.
	dropped bool
}

var (
	_ keypool.Store          = (*Store)(nil)
	_ keypool.AffinityStore  = (*Store)(nil)
	_ keypool.HealthNotifier = (*Store)(nil)
	_ keypool.DisabledStore  = (*Store)(nil)
)

// New returns a Store over a client the caller owns: Close does not close
// it. The client may be a single server, a Sentinel failover client or a
// Cluster client. New asks Redis for a PING: when Redis does not answer, it
// returns an error, or, with WithLocalFallback, a store that serves locally
// until Redis answers.
func New(client redis.UniversalClient, opts ...Option) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newStore(client, false, cfg)
}

// Open returns a Store over a client of its own for the server a URL names,
// such as "redis://user:password@localhost:6379/0" or "rediss://…" for TLS
// (see redis.ParseURL for the options a URL can carry), or for a Redis
// Cluster when the URL names more of its nodes with addr parameters, as
// redis.ParseClusterURL reads them:
// "redis://host:7000?addr=host:7001&addr=host:7002". A URL without addr
// that names a Cluster node is refused, in one line that says so: a plain
// client of a node serves only the slots the node holds, until a failover
// moves them. The client waits for Redis no longer than the store's
// timeout (WithTimeout), unless the URL sets its own. Close closes the
// client. Otherwise it is New.
func Open(rawURL string, opts ...Option) (*Store, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	client, err := openClient(rawURL, cfg.timeout)
	if err != nil {
		return nil, err
	}
	s, err := newStore(client, true, cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	return s, nil
}

// IsClusterURL reports whether Open opens a Redis Cluster client for
// rawURL: the URL names nodes with addr parameters.
func IsClusterURL(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Query().Has("addr")
}

// openClient returns the client Open opens for rawURL, whose calls wait no
// longer than timeout unless the URL says otherwise.
func openClient(rawURL string, timeout time.Duration) (redis.UniversalClient, error) {
	if _, err := url.Parse(rawURL); err != nil {
		// url.Error quotes the URL, and with it any password.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("redisstore: parsing the Redis URL: %w", err)
	}
	if IsClusterURL(rawURL) {
		o, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("redisstore: parsing the Redis Cluster URL: %w", err)
		}
		o.ContextTimeoutEnabled = true
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = orDefault(o.DialTimeout, timeout), orDefault(o.ReadTimeout, timeout), orDefault(o.WriteTimeout, timeout)
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisstore: parsing the Redis URL: %w", err)
	}
	o.ContextTimeoutEnabled = true
	o.DialTimeout, o.ReadTimeout, o.WriteTimeout = orDefault(o.DialTimeout, timeout), orDefault(o.ReadTimeout, timeout), orDefault(o.WriteTimeout, timeout)
	return redis.NewClient(o), nil
}

// orDefault returns d, or def when d is not set.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// Cluster reports whether the store's client is a Redis Cluster client.
func (s *Store) Cluster() bool {
	_, ok := s.rdb.(*redis.ClusterClient)
	return ok
}

func newStore(client redis.UniversalClient, owned bool, cfg config) (*Store, error) {
	s := &Store{rdb: client, owned: owned, cfg: cfg, id: rand.Text()[:16], kick: make(chan struct{}, 1), stop: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.fallback {
		s.local = keypool.NewMemoryStore()
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	server, err := client.Time(ctx).Result() // a PING that also tells the server's time
	if err == nil {
		if cfg.serverNow != nil {
			server = cfg.serverNow()
		}
		s.skew.Store(server.UnixMilli() - cfg.clock().UnixMilli())
		err = s.notClusterNode(ctx)
	}
	switch {
	case errors.Is(err, errClusterNode):
		s.cancel()
		return nil, err
	case err != nil && !cfg.fallback:
		s.cancel()
		return nil, &unavailableError{err}
	case err != nil:
		s.markDown(err)
	}
	s.done.Add(1)
	go s.run()
	return s, nil
}

// Close writes the adjustments not yet sent, if Redis answers, stops the
// store's goroutine and, for a store made by Open, closes its client. The
// store must not be used after Close. Close may be called more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		s.cancel()
		s.done.Wait()
		if s.unavailable() == nil {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			s.closeErr = s.sendPending(ctx)
			cancel()
		}
		if s.owned {
			if err := s.rdb.Close(); err != nil && s.closeErr == nil {
				s.closeErr = fmt.Errorf("redisstore: closing the client: %w", err)
			}
		}
	})
	return s.closeErr
}

// Take implements keypool.Store: one script checks and records the request,
// on the server's clock; t.Now, moved by how far the clocks were apart at
// the latest answer, only places calendar days and months. The adjustments
// of earlier settles and releases not yet sent ride in the same round trip.
func (s *Store) Take(ctx context.Context, t keypool.Claim) (keypool.Grant, error) {
	if err := windowspec.CheckModel(t.Model); err != nil {
		return keypool.Grant{}, fmt.Errorf("redisstore: %w", err)
	}
	if err := s.unavailable(); err != nil {
		return s.takeLocal(ctx, t, err)
	}
	take := s.takeCall(t, false)
	s.sends.RLock()
	carried := s.carry(maxCarried, t.Provider)
	cctx, cancel := s.bound(ctx)
	s.exec(cctx, append(carried, take), nil)
	cancel()
	s.sends.RUnlock()
	s.checkCarried(ctx, carried)
	v, err := take.cmd.Int64Slice()
	if err == nil && len(v) == 2 && v[0] == 2 {
		// The calendar days and months placed by the skew do not hold the
		// server's time (a clock put right since the latest answer): once
		// more, at the time the answer shows.
		s.skew.Store(v[1] - t.Now.UnixMilli())
		take = s.takeCall(t, true)
		cctx, cancel := s.bound(ctx)
		s.exec(cctx, []*evalCall{take}, nil)
		cancel()
		v, err = take.cmd.Int64Slice()
	}
	if err == nil && len(v) != 6 && len(v) != 11 {
		err = fmt.Errorf("take script answered %v", v)
	}
	if wrongType(err) {
		return s.passOver(ctx, t, take.keys, err), nil
	}
	if err != nil {
		return s.takeLocal(ctx, t, s.fail(ctx, err))
	}
	s.sound(t.Provider, t.KeyID)
	s.skew.Store(v[len(v)-1] - t.Now.UnixMilli()) // the server's own time, last
	if v[0] == 1 && len(v) == 11 {
		r := &reservation{store: s, claim: t, at: v[1], counted: v[4], tokens: v[5],
			held: [2]int64{v[6], v[7]}, resets: [2]int64{v[8], v[9]}}
		return keypool.Grant{OK: true, Level: int(v[3]), Reservation: r}, nil
	}
	// The server's time, to the take's: replicas whose clocks differ agree
	// on when a key is back, each by its own clock.
	retryAt := t.Now.Add(time.Duration(v[1]-v[4]) * time.Millisecond).UTC()
	reason := keypool.Kind(v[2])
	switch v[2] {
	case reasonMinute:
		reason = keypool.KindRate
	case reasonDay:
		reason = keypool.KindQuota
	}
	return keypool.Grant{RetryAt: retryAt, Reason: reason, Level: int(v[3])}, nil
}

// scope returns the names of the keys that hold the windows of a key, or of
// its account when it names one.
func (s *Store) scope(provider, keyID, account string) keyNames {
	if account != "" {
		keyID = windowspec.AccountID(account)
	}
	return names(s.cfg.prefix, provider, keyID)
}

// calendarDays returns, for calendar days, the start and end of the day
// that holds now and the end of the next (Unix milliseconds); 0 0 0 for
// sliding days.
func calendarDays(zone *time.Location, hour int, now time.Time) (start, end, next int64) {
	if zone == nil {
		return 0, 0, 0
	}
	day, dayEnd := windowspec.CalendarDay(now, hour, zone)
	_, nextEnd := windowspec.CalendarDay(dayEnd, hour, zone)
	return day.UnixMilli(), dayEnd.UnixMilli(), nextEnd.UnixMilli()
}

// calendarMonths returns the start and end of the calendar month that holds
// now and the end of the next (Unix milliseconds), by days' zone and hour.
func calendarMonths(zone *time.Location, hour int, now time.Time) (start, end, next int64) {
	month, monthEnd := windowspec.CalendarMonth(now, hour, zone)
	_, nextEnd := windowspec.CalendarMonth(monthEnd, hour, zone)
	return month.UnixMilli(), monthEnd.UnixMilli(), nextEnd.UnixMilli()
}

// budgetMicros returns a budget's caps in millionths of a dollar, as the
// memory store counts them.
func budgetMicros(b keypool.Budget) (day, month int64) {
	micros := func(usd float64) int64 { return exact(int64(min(math.Floor(usd*1e6), 1<<53))) }
	return micros(b.PerDay), micros(b.PerMonth)
}

// takeCall returns the take script's call for t.
func (s *Store) takeCall(t keypool.Claim, again bool) *evalCall {
	n := s.scope(t.Provider, t.KeyID, t.Account)
	own := names(s.cfg.prefix, t.Provider, t.KeyID)
	cal := t.DayZone != nil
	now := s.serverTime(t.Now)
	start, end, next := calendarDays(t.DayZone, t.DayHour, now)
	bd, bm := budgetMicros(t.Budget)
	ad, am := budgetMicros(t.AccountBudget)
	zone, hour := t.DayZone, t.DayHour
	if zone == nil {
		zone, hour = time.UTC, 0 // budgets count calendar days: midnight UTC when windows slide
	}
	dayStart, dayEnd, nextDay := calendarDays(zone, hour, now)
	monthStart, monthEnd, nextMonth := calendarMonths(zone, hour, now)
	return s.once(call("take",
		[]string{n.index(), n.benches(), n.minute(t.Model), n.dayOf(t.Model, cal),
			n.minute(overflowModel), n.dayOf(overflowModel, cal), n.capMinute(), n.capDayOf(cal), own.benches(),
			own.spend(), n.spend(), own.index()},
		t.Model, overflowModel, maxModels, exact(t.Tokens),
		exact(t.Limits.RPM), exact(t.Limits.TPM), exact(t.Limits.RPD), exact(t.Limits.TPD),
		exact(t.Cap.RPM), exact(t.Cap.TPM), exact(t.Cap.RPD), exact(t.Cap.TPD),
		start, end, next, flag(t.Named), exact(t.Cost), bd, bm, ad, am,
		dayStart, dayEnd, nextDay, monthStart, monthEnd, nextMonth, flag(t.Unbounded), flag(again)), n)
}

// serverTime returns the server's time at the pool's time now, as the
// latest take's answer showed the two clocks apart.
func (s *Store) serverTime(now time.Time) time.Time {
	return now.Add(time.Duration(s.skew.Load()) * time.Millisecond)
}

// exact returns n within what a Lua number holds exactly, and never below
// zero.
func exact(n int64) int64 { return min(max(n, 0), maxExact) }

// reservation is a take Redis admitted: settling or releasing it queues an
// adjustment, which the next take carries, or the store's goroutine sends
// within settleDelay.
type reservation struct {
	store   *Store
	claim   keypool.Claim
	at      int64 // when Redis recorded the take, Unix milliseconds
	counted int64 // the windows that count it, as the take script says
	tokens  int64 // the tokens it counts now
	// held is what the take reserves of the key's and the account's
	// spend until it settles, in millionths of a dollar, as of their
	// resets; cost is what it spent since.
	held, resets [2]int64
	cost         int64
	mu           sync.Mutex
	settled      bool
	released     bool
}

// Settle implements keypool.Reservation.
func (r *reservation) Settle(_ context.Context, tokens, cost int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return nil
	}
	tokens, cost = exact(tokens), exact(cost)
	r.store.queue(r.spend(adjustment{provider: r.claim.Provider, claim: r.claim, at: r.at, counted: r.counted, tokens: tokens - r.tokens}, cost))
	r.tokens = tokens
	return nil
}

// Release implements keypool.Reservation.
func (r *reservation) Release(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return nil
	}
	r.released = true
	r.store.queue(r.spend(adjustment{provider: r.claim.Provider, claim: r.claim, at: r.at, counted: r.counted, requests: -1, tokens: -r.tokens}, 0))
	return nil
}

// spend returns a with what makes cost what the take spent: what it
// reserved is no longer held. r.mu must be held.
func (r *reservation) spend(a adjustment, cost int64) adjustment {
	a.cost, a.resets = cost-r.cost, r.resets
	if !r.settled {
		a.held = [2]int64{-r.held[0], -r.held[1]}
	}
	r.settled, r.cost = true, cost
	return a
}

// Bench implements keypool.Store. The bench lasts from the server's time
// as long as b.Until is after the store's clock (WithClock), in
// milliseconds, rounded up: replicas whose clocks differ bench for as
// long. A bench made during an outage and written later lasts from when
// it is written as long as is left of it then.
func (s *Store) Bench(ctx context.Context, b keypool.Bench) error {
	if err := windowspec.CheckModel(b.Model); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	n := s.scope(b.Provider, b.KeyID, b.Account)
	all := 0
	if b.AllModels {
		all = 1
	}
	remote := func(ctx context.Context) error {
		lasts := int64(0)
		if !b.Until.IsZero() {
			d := b.Until.Sub(s.cfg.clock())
			lasts = max(int64((d+time.Millisecond-1)/time.Millisecond), 0)
		}
		c := call("bench", []string{n.index(), n.benches()},
			b.Model, overflowModel, maxModels, all, int(b.Kind), lasts, b.Level)
		if b.Until.IsZero() && b.Level == 0 && !b.AllModels {
			// Only the level, back to zero: a success after quota answers.
			c = call("reset", []string{n.index(), n.benches()}, b.Model, overflowModel, maxModels)
		}
		return s.runner(c)(ctx)
	}
	return s.change(ctx, s.bounded(remote), func() error { return s.local.Bench(ctx, b) })
}

// Learn implements keypool.Store. The statement is queued, as a settle is:
// the next take carries it, in the same round trip, ahead of itself. While
// Redis is down it goes to the local windows (WithLocalFallback), or fails.
func (s *Store) Learn(ctx context.Context, st keypool.Stated) error {
	if err := windowspec.CheckModel(st.Model); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if err := s.unavailable(); err != nil {
		if !s.fallback(err) {
			return err
		}
		return s.local.Learn(ctx, st)
	}
	s.queue(adjustment{provider: st.Provider, call: s.learnCall(st)})
	return nil
}

// learnCall returns the learn script's call for st.
func (s *Store) learnCall(st keypool.Stated) *evalCall {
	n := s.scope(st.Provider, st.KeyID, st.Account)
	cal := st.DayZone != nil
	start, end, next := calendarDays(st.DayZone, st.DayHour, s.serverTime(st.Now))
	leaves := func(t time.Time) int64 { // rounded up: a count leaves no sooner than stated
		if t.IsZero() {
			return 0
		}
		t = s.serverTime(t) // the script counts by the server's clock
		return (t.UnixNano() + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	}
	l, u := st.Limits, st.Used
	return call("learn", []string{n.index(), n.benches(), n.minute(st.Model), n.dayOf(st.Model, cal),
		n.minute(overflowModel), n.dayOf(overflowModel, cal)},
		st.Model, overflowModel, maxModels, exact(l.RPM), exact(l.RPD), exact(l.TPM), exact(l.TPD),
		known(u.RPM), known(u.RPD), known(u.TPM), known(u.TPD), leaves(st.MinuteReset), leaves(st.DayReset),
		start, end, next)
}

// known returns a vendor's count within what a Lua number holds exactly, or
// -1 when it is not stated.
func known(n int64) int64 {
	if n < 0 {
		return -1
	}
	return exact(n)
}

// Unbench implements keypool.Store: it lifts the benches and levels, and
// empties the windows and forgets the limits of every model the key's
// index names.
func (s *Store) Unbench(ctx context.Context, provider, keyID string) error {
	n := names(s.cfg.prefix, provider, keyID)
	remote := s.bounded(func(ctx context.Context) error {
		fields, err := s.rdb.HKeys(ctx, n.index()).Result()
		if err != nil {
			return err
		}
		keys := []string{n.index(), n.benches(), n.capMinute(), n.capDay(), n.capCalendar()}
		for _, f := range fields {
			if m, ok := strings.CutPrefix(f, "m"); ok {
				keys = append(keys, n.minute(m), n.day(m), n.calendar(m))
			}
		}
		return s.runner(call("forget", keys))(ctx)
	})
	return s.change(ctx, remote, func() error { return s.local.Unbench(ctx, provider, keyID) })
}

// ResetSpend implements keypool.SpendResetter.
func (s *Store) ResetSpend(ctx context.Context, provider, keyID string) error {
	key := names(s.cfg.prefix, provider, keyID).spend()
	remote := s.bounded(s.runner(call("resetspend", []string{key})))
	return s.change(ctx, remote, func() error {
		if r, ok := s.local.(keypool.SpendResetter); ok {
			return r.ResetSpend(ctx, provider, keyID)
		}
		return nil
	})
}

// SetDisabled implements keypool.DisabledStore: one HSET or HDEL of the
// pool's hash of keys out of rotation, which every replica reads. While
// Redis is down, WithLocalFallback keeps the change — the latest of each
// key, never dropped — to write once Redis answers, at the next Disabled;
// without, it returns the ErrUnavailable.
func (s *Store) SetDisabled(ctx context.Context, provider, keyID string, d *keypool.Disabled) error {
	err := s.unavailable()
	if err == nil {
		if err = s.bounded(s.writeDisabled(provider, keyID, d))(ctx); err == nil {
			s.disabled.set(provider, keyID, d, false)
			return nil
		}
		err = s.fail(ctx, err)
	}
	if !s.fallback(err) {
		return err
	}
	s.disabled.set(provider, keyID, d, true)
	return nil
}

// writeDisabled returns the call that writes one key's change to Redis.
func (s *Store) writeDisabled(provider, keyID string, d *keypool.Disabled) func(context.Context) error {
	name := disabledName(s.cfg.prefix, provider)
	return func(ctx context.Context) error {
		if d == nil {
			return s.rdb.HDel(ctx, name, keyID).Err()
		}
		return s.rdb.HSet(ctx, name, keyID, encodeDisabled(*d)).Err()
	}
}

// Disabled implements keypool.DisabledStore: one HGETALL, after the
// changes an outage kept. While Redis is down it answers with what Redis
// last said and the changes made since — so that a pool made during an
// outage, as a reload makes one, keeps the keys out — or, when this store
// has never read them, with the error: a pool then keeps what it knew. A
// value it cannot read keeps its key out, by unreadableDisabled.
func (s *Store) Disabled(ctx context.Context, provider string) (map[string]keypool.Disabled, error) {
	err := s.unavailable()
	if err == nil {
		err = s.flushDisabled(ctx, provider)
	}
	var m map[string]string
	if err == nil {
		cctx, cancel := s.bound(ctx)
		m, err = s.rdb.HGetAll(cctx, disabledName(s.cfg.prefix, provider)).Result()
		cancel()
		if err != nil {
			err = s.fail(ctx, err)
		}
	}
	if err != nil {
		if known, ok := s.disabled.known(provider); ok {
			return known, nil
		}
		return nil, err
	}
	out := make(map[string]keypool.Disabled, len(m))
	for id, v := range m {
		out[id] = decodeDisabled(v)
	}
	s.disabled.read(provider, out)
	return out, nil
}

// flushDisabled writes the changes of provider's keys an outage kept.
func (s *Store) flushDisabled(ctx context.Context, provider string) error {
	for keyID, d := range s.disabled.pendingOf(provider) {
		if err := s.bounded(s.writeDisabled(provider, keyID, d))(ctx); err != nil {
			return s.fail(ctx, err)
		}
		s.disabled.written(provider, keyID, d)
	}
	return nil
}

// unreadableDisabled is who disabled a key whose value in Redis cannot be
// read: it stays out of rotation, as whoever wrote the field meant, until
// an operator enables it.
const unreadableDisabled = "(an unreadable value in Redis)"

// encodeDisabled returns the value of a key out of rotation: when, in Unix
// milliseconds, a space, and who.
func encodeDisabled(d keypool.Disabled) string {
	return strconv.FormatInt(d.At.UnixMilli(), 10) + " " + d.By
}

// decodeDisabled reads a value encodeDisabled wrote.
func decodeDisabled(v string) keypool.Disabled {
	at, by, ok := strings.Cut(v, " ")
	ms, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || ms < 0 {
		return keypool.Disabled{By: unreadableDisabled}
	}
	return keypool.Disabled{By: by, At: time.UnixMilli(ms).UTC()}
}

// Affinity implements keypool.AffinityStore: the key a conversation of the
// pool stays on, its time to live set to idle again, in one GETEX.
func (s *Store) Affinity(ctx context.Context, provider, conversation string, idle time.Duration) (string, error) {
	if err := s.unavailable(); err != nil {
		return "", err
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	id, err := s.rdb.GetEx(cctx, affinityName(s.cfg.prefix, provider, conversation), idle).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", s.fail(ctx, err)
	}
	return id, nil
}

// SetAffinity implements keypool.AffinityStore.
func (s *Store) SetAffinity(ctx context.Context, provider, conversation, keyID string, idle time.Duration) error {
	if err := s.unavailable(); err != nil {
		return err
	}
	cctx, cancel := s.bound(ctx)
	defer cancel()
	if err := s.rdb.Set(cctx, affinityName(s.cfg.prefix, provider, conversation), keyID, idle).Err(); err != nil {
		return s.fail(ctx, err)
	}
	return nil
}

// State implements keypool.Store, on the server's clock; the times it
// answers are moved to now's. It sends the adjustments not yet sent first.
func (s *Store) State(ctx context.Context, provider, keyID string, now time.Time) (keypool.KeyStats, error) {
	if err := s.unavailable(); err != nil {
		if !s.fallback(err) {
			return keypool.KeyStats{}, err
		}
		return s.local.State(ctx, provider, keyID, now)
	}
	cctx, cancel := s.bound(ctx)
	st, err := s.state(cctx, provider, keyID, now)
	cancel()
	if err != nil {
		if err = s.fail(ctx, err); !s.fallback(err) {
			return keypool.KeyStats{}, err
		}
		return s.local.State(ctx, provider, keyID, now)
	}
	return st, nil
}

// Flush implements keypool.Store: it sends the adjustments not yet sent.
// While Redis is down it returns ErrUnavailable if any wait.
func (s *Store) Flush(ctx context.Context) error {
	if err := s.unavailable(); err != nil {
		s.mu.Lock()
		n := len(s.pending)
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		return err
	}
	return s.sendPending(ctx)
}

// errClusterNode is the error of a plain client of a Redis Cluster node.
var errClusterNode = errors.New("is a Redis Cluster node: name the cluster's nodes in the URL (redis://host:7000?addr=host:7001&addr=host:7002) to open a Cluster client")

// clusterNodeError says that the plain client of addr meets a Redis
// Cluster node.
type clusterNodeError struct{ addr string }

func (e *clusterNodeError) Error() string {
	return "redisstore: " + e.addr + " " + errClusterNode.Error()
}
func (e *clusterNodeError) Unwrap() error { return errClusterNode }

// notClusterNode returns a clusterNodeError when the store's client is a
// plain client and its server says it is a Cluster node (INFO cluster:
// cluster_enabled:1); a server that does not answer INFO is taken as no
// Cluster node.
func (s *Store) notClusterNode(ctx context.Context) error {
	c, ok := s.rdb.(*redis.Client)
	if !ok {
		return nil
	}
	info, err := c.Info(ctx, "cluster").Result()
	if err != nil {
		if isUnavailable(err) {
			return err
		}
		return nil
	}
	if strings.Contains(info, "cluster_enabled:1") {
		return &clusterNodeError{addr: c.Options().Addr}
	}
	return nil
}

// bound returns ctx bounded by the store's timeout for one call.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.timeout)
}

// bounded returns call run within the store's timeout.
func (s *Store) bounded(call func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		ctx, cancel := s.bound(ctx)
		defer cancel()
		return call(ctx)
	}
}

// fail returns the error of a failed call to Redis: ErrUnavailable, after
// marking Redis down, when Redis did not answer; the context's error as it
// is; any other as a failure of the store.
func (s *Store) fail(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("redisstore: %w", err)
	case isUnavailable(err):
		return s.markDown(err)
	case redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK"):
		// Only a plain client sees these: a Cluster client follows them.
		addr := "the server"
		if c, ok := s.rdb.(*redis.Client); ok {
			addr = c.Options().Addr
		}
		return fmt.Errorf("%w (%w)", &clusterNodeError{addr: addr}, err)
	}
	return fmt.Errorf("redisstore: %w", err)
}

// isUnavailable reports whether err says that Redis did not answer, or
// answered that it cannot serve now.
func isUnavailable(err error) bool {
	if err == nil {
		return false
	}
	var reply redis.Error
	if !errors.As(err, &reply) {
		return true // no answer: the network, a timeout, a closed client
	}
	for _, prefix := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY"} {
		if redis.HasErrorPrefix(err, prefix) {
			return true
		}
	}
	return false
}

// fallback reports whether the store serves locally after err.
func (s *Store) fallback(err error) bool {
	return s.local != nil && errors.Is(err, ErrUnavailable)
}

// takeLocal answers a take that Redis could not, with err: from the local
// windows with WithLocalFallback, else with err.
func (s *Store) takeLocal(ctx context.Context, t keypool.Claim, err error) (keypool.Grant, error) {
	if !s.fallback(err) {
		return keypool.Grant{}, err
	}
	return s.local.Take(ctx, s.localTake(t))
}

// localTake returns t as the local windows take it: each limit divided
// among the replicas, and the estimate within the smallest token limit. The
// local windows' grant settles and releases itself.
func (s *Store) localTake(t keypool.Claim) keypool.Claim {
	t.Limits, t.Cap = divide(t.Limits, s.cfg.replicas), divide(t.Cap, s.cfg.replicas)
	if lim := windowspec.Tighter(windowspec.Tighter(t.Limits.TPM, t.Limits.TPD), windowspec.Tighter(t.Cap.TPM, t.Cap.TPD)); lim > 0 {
		t.Tokens = min(t.Tokens, lim)
	}
	return t
}

// divide returns each limit of l divided by n, rounded down, at least 1.
func divide(l keypool.Limits, n int64) keypool.Limits {
	d := func(v int64) int64 {
		if v <= 0 {
			return v
		}
		return max(v/n, 1)
	}
	return keypool.Limits{RPM: d(l.RPM), RPD: d(l.RPD), TPM: d(l.TPM), TPD: d(l.TPD)}
}
