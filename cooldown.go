package keypool

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A key is benched — keypool's word for a cooldown — when an answer says it
// cannot serve for a while: Kind says what kind of outcome an answer is, and
// benchPolicy how long each kind benches a key. A quota answer that does not
// date its reset benches a key longer each time it recurs: the key's level
// for the model counts those answers since its last success.

// Kind is the kind of outcome an answer is, and so how long it benches a key.
type Kind int

// The kinds of outcome.
const (
	// KindNone is a success, a bad request, an unknown model, a context that
	// is too long, or a network error before any answer: no bench, no
	// failover.
	KindNone Kind = iota
	// KindRate is a throttle: the key is benched until the short window
	// resets.
	KindRate
	// KindQuota is a spent window or balance: a daily, 5-hour, weekly or
	// monthly quota, or a billing condition.
	KindQuota
	// KindAuth is a revoked or unauthorized key.
	KindAuth
	// KindTransient is the vendor's bad moment (5xx, 529), not the key's.
	KindTransient
)

var kindNames = [...]string{"none", "rate", "quota", "auth", "transient"}

// String returns the kind's name: "none", "rate", "quota", "auth" or
// "transient".
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// MarshalText returns the kind's name, so that JSON shows "rate", not 1.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// benchPolicy holds how long each kind of failure benches a key.
type benchPolicy struct {
	rate      time.Duration   // a throttle that gives no date
	transient time.Duration   // a 5xx that gives no Retry-After
	auth      time.Duration   // a revoked or unauthorized key
	billing   time.Duration   // a spent balance or a 402
	levels    []time.Duration // quota answers without a date, by level
	looks     []time.Duration // early looks at an undated quota bench, after its start
	min, max  time.Duration   // the clamp on every bench
}

func defaultBenchPolicy() benchPolicy {
	return benchPolicy{
		rate:      time.Minute,
		transient: time.Minute,
		auth:      12 * time.Hour,
		billing:   12 * time.Hour,
		levels:    []time.Duration{2 * time.Minute, 10 * time.Minute, time.Hour, 12 * time.Hour},
		looks: []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute,
			time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour},
		min: time.Second,
		max: 12 * time.Hour,
	}
}

// benchFor returns how long verdict v benches a key at now, given the level
// of the key for the model: the number of quota answers without a date since
// its last success. climb reports that the bench came from the quota levels,
// so the level goes up by one. A zero duration means no bench.
func (b benchPolicy) benchFor(v verdict, level int, now time.Time) (d time.Duration, climb bool) {
	if v.quoted {
		// Confirmed by another key that served the same request, words
		// the request could have written still date nothing: the shortest
		// bench, after which the key returns carefully — one request a
		// minute while it keeps failing.
		return max(b.rate, b.min), false
	}
	dated := !v.reset.ResetAt.IsZero() // a reset at or before now asks for the shortest bench
	switch v.kind {
	case KindRate:
		d = b.rate
		if dated {
			d = v.reset.ResetAt.Sub(now)
		}
	case KindQuota:
		switch {
		case dated:
			d = v.reset.ResetAt.Sub(now)
		case v.billing:
			d = b.billing
		default:
			d, climb = b.levels[min(max(level, 0), len(b.levels)-1)], true
		}
	case KindAuth:
		d = b.auth
	case KindTransient:
		d = b.transient
		if v.reset.HasRetryAfter && v.reset.RetryAfter > 0 {
			d = v.reset.RetryAfter
		}
	default:
		return 0, false
	}
	return min(max(d, b.min), b.max), climb
}

// What an answer may bench is the package doc's rule of that name; quote,
// mayHaveWritten, wholeKey and ofAccount are its code, and the vendor's own words are the
// signs the reading gathers apart from prose (bodyEvidence.coded and the
// headers' evidence).

// quote marks verdict v of an answer with status, its body read into b,
// quoted when it rests on words the request could have written: a 400 or
// 403 — or a 5xx that speaks of money — whose kind no field or header in
// vendor states, or a 402 that speaks of the request's own size ("fewer
// max_tokens"). v.echo is what of the prose made it so: a request that
// holds none of those words cannot have written them (see mayHaveWritten),
// and its answer is the key's after all. A kind the status alone gives (a
// bare 403) or a 402 of the request's size stays quoted whatever the
// request holds.
func quote(status int, v *verdict, b *bodyEvidence, vendor signs) {
	switch {
	case v.kind == KindNone || v.oversized:
		return
	case status == http.StatusPaymentRequired && b.sized:
		v.quoted = true
		return
	case status == http.StatusBadRequest, status == http.StatusForbidden:
	case status >= 500 && v.billing: // a server error that speaks of money
	default:
		return
	}
	need, said := signLimit, b.throttled || b.quota || b.hasSpent || b.hasRetryAfter || b.noAllowance
	switch {
	case v.billing:
		need, said = signBilling, b.billing
	case v.kind == KindAuth:
		need, said = signAuth, b.auth
	}
	if vendor&need != 0 {
		return
	}
	v.quoted = true
	if said {
		v.echo = need
	}
}

// mayHaveWritten reports whether a request could have written the words
// of a quoted answer's conditions echo: its path, its query or its body
// holds a phrase of theirs or a JSON escape that may hide one — or the pool
// does not hold its body whole (whole false) to tell.
func mayHaveWritten(echo signs, req *http.Request, body []byte, whole bool) bool {
	if !whole || echo == 0 {
		return true
	}
	if bytes.Contains(body, []byte(`\u`)) {
		return true
	}
	for _, s := range [...]string{string(body), req.URL.Path, req.URL.RawQuery} {
		if s = asciiLower(s); echo&signBilling != 0 && containsAny(s, billingPhrases[:]) ||
			echo&signAuth != 0 && containsAny(s, authPhrases[:]) ||
			echo&signLimit != 0 && (containsAny(s, quotaPhrases[:]) || containsAny(s, throttlePhrases[:]) || containsAny(s, limitWords[:])) {
			return true
		}
	}
	return req.URL.RawQuery != "" && strings.Contains(req.URL.RawQuery, "%")
}

// limitWords are the words any prose that names a window or a wait holds
// one of; a request that holds none cannot have written such prose.
var limitWords = [...]string{"limit", "quota", "per ", "daily", "weekly", "monthly", "hour", "day", "week", "month", "minute", "second", "retry", "reset", "wait", "try again", "available"}

// wholeKey reports whether verdict v benches the whole key rather than the
// key for one model: a key that is revoked or out of money, or whose
// plan's window is spent, in the vendor's own words, is out for every
// model.
func (v verdict) wholeKey() bool {
	return (v.kind == KindAuth || v.billing || v.plan) && !v.quoted
}

// ofAccount reports whether verdict v benches every key of the key's
// account: a throttle or a spent quota, in the vendor's own words, is the
// account's, whose keys share the windows that are spent.
func (v verdict) ofAccount() bool {
	return (v.kind == KindRate || v.kind == KindQuota) && !v.quoted
}

// badMoment marks v again when it is a bad moment (KindTransient) and an
// earlier attempt of c's request had one: a request every key it reaches
// fails says more of itself, or of the vendor, than of any key — a request
// the vendor cannot process answers 500 on each — so it benches one key,
// fails over once, and goes back to the caller, rather than bench every
// key of the pool for the others.
func (c *call) badMoment(v *verdict) {
	if v.kind == KindTransient && !v.quoted { // a quoted answer has its own rule
		v.again = c.transient
		c.transient = true
	}
}

// observe records what an answer said of a lease's key — its count, the
// vendor's reading, the end of a climb up the quota levels on a success, a
// bench on a failure or on a success that says its window is spent — and
// returns when the key comes back if it was benched.
func (p *Pool) observe(ctx context.Context, l *lease, v *verdict, now time.Time) time.Time {
	// A hook that panics below (OnRateLimit, OnEvict) ends the probe as
	// failed, or the key's return would wait for it for good; each way
	// out ends it first, and this does nothing.
	defer p.probed(l, false)
	l.key.answers[v.kind].Add(1)
	p.tel.answered(ctx, l.key, v)
	if !v.quoted { // words the request could have written tell OnRateLimit nothing
		p.noteReading(l, v, now)
	}
	p.learn(ctx, l, &v.stated, now)
	if p.single() || v.oversized {
		// One key is not a pool; a request too large for any key is no
		// failure of this one.
		p.probed(l, true)
		return time.Time{}
	}
	if v.quoted || v.again {
		// Words the request could have written bench nothing until
		// another key serves the same request (confirm); a second bad
		// moment of one request benches nothing more.
		p.probed(l, false)
		return time.Time{}
	}
	if v.kind == KindNone {
		p.succeeded(ctx, l)
		spent := spentWindow(v, l.claim.Limits.over(v.stated.limits), now)
		if spent.kind == KindNone {
			p.probed(l, true)
			return time.Time{}
		}
		v = &spent
	}
	until := p.bench(ctx, l, v, now)
	p.probed(l, false)
	return until
}

// probed ends the lease's probe, if it was the one request of its key's
// careful return.
func (p *Pool) probed(l *lease, succeeded bool) {
	if l.probe {
		l.key.returns.done(l.claim.Model, succeeded)
		l.probe = false
	}
}

// noteReading keeps what an answer said of the key's windows as its last
// reading, and tells OnRateLimit when the answer names a window.
func (p *Pool) noteReading(l *lease, v *verdict, now time.Time) {
	if !v.reset.HasUtilization && v.reset.ResetAt.IsZero() && v.stated.limits.none() {
		return
	}
	r := Reading{Provider: p.provider, KeyID: l.key.ID, Model: l.claim.Model,
		Window: v.reset.Window, Utilization: v.reset.Utilization, ResetAt: v.reset.ResetAt, Limits: v.stated.limits}
	l.key.lastMu.Lock()
	l.key.last, l.key.lastAt = r, now
	l.key.lastMu.Unlock()
	if f := p.cfg.onRateLimit; f != nil && v.reset.Window != WindowNone {
		f(r)
	}
}

// learn tells the store what an answer stated of the key's windows — the
// vendor's limits and counts — so that they hold whatever the pool was told
// (Store.Learn); a token limit the vendor states makes the pool count
// tokens.
func (p *Pool) learn(ctx context.Context, l *lease, s *statedWindows, now time.Time) {
	if !s.any {
		return
	}
	if s.limits.hasTokens() && !p.tokens.Load() {
		p.tokens.Store(true)
	}
	p.tel.learned(ctx, l.key, s.limits)
	if r, ok := l.grant.Reservation.(*memReservation); ok && p.mem != nil {
		// The package's own store learns into the entries the take
		// counted in, with nothing looked up or built for it.
		r.learn(s, now)
		p.storeResult(opLearn, nil)
		return
	}
	st := Stated{Provider: p.provider, KeyID: l.key.ID, Account: l.key.Account, Model: l.claim.Model,
		Limits: s.limits, Used: s.used, DayZone: p.cfg.days.loc, DayHour: p.cfg.days.hour, Now: now}
	if s.minuteWait > 0 {
		st.MinuteReset = now.Add(s.minuteWait)
	}
	if s.dayWait > 0 {
		st.DayReset = now.Add(s.dayWait)
	}
	p.storeResult(opLearn, p.store.Learn(ctx, st))
}

// succeeded sets the key's level for the model back to zero after a
// success, if quota answers had raised it.
func (p *Pool) succeeded(ctx context.Context, l *lease) {
	if l.grant.Level > 0 {
		p.storeResult(opBench, p.store.Bench(ctx, Bench{Provider: p.provider, KeyID: l.key.ID, Model: l.claim.Model}))
	}
}

// spentWindow returns the bench verdict of a success that says its window is
// spent: the key is set aside until the window resets, before the vendor
// answers 429 — as a quota when the window is named or lifts beyond
// longThrottle. Any other success benches nothing (KindNone).
//
// A key whose limits the pool knows — told, or stated by this answer and
// learned — needs none of this for a short window: its own windows, raised
// to the vendor's count, refuse until the next slot frees, where a vendor's
// reset (OpenAI's: until the window is whole again) would idle it longer. A
// spent window that lifts beyond longThrottle is benched all the same.
func spentWindow(v *verdict, limits Limits, now time.Time) verdict {
	if !v.reset.exhausted(now) || !limits.none() && v.reset.ResetAt.Sub(now) <= longThrottle {
		return verdict{}
	}
	kind := KindRate
	if v.reset.Window != WindowNone || v.reset.ResetAt.Sub(now) > longThrottle {
		kind = KindQuota
	}
	return verdict{kind: kind, reset: v.reset, plan: v.plan}
}

// bench sets the lease's key aside as verdict v says, reports it, and
// returns when the key comes back.
func (p *Pool) bench(ctx context.Context, l *lease, v *verdict, now time.Time) time.Time {
	return p.benchKey(ctx, l.key, l.claim.Model, l.grant.Level, v, now)
}

// benchKey sets key k aside for model as verdict v says, k being at level
// for the model, reports it, and returns when the key comes back.
func (p *Pool) benchKey(ctx context.Context, k *poolKey, m string, level int, v *verdict, now time.Time) time.Time {
	d, climb := p.cfg.bench.benchFor(*v, level, now)
	b := Bench{Provider: p.provider, KeyID: k.ID, Model: m, AllModels: v.wholeKey(),
		Kind: v.kind, Until: now.Add(d), Level: level}
	var look early
	if v.kind == KindQuota && v.reset.ResetAt.IsZero() && !v.quoted {
		// A quota that dates nothing is looked at early. A look that
		// failed goes on with the bench it looked into: no climb.
		var failed bool
		if look, failed = k.returns.looking(model(b), now); failed {
			look.looks++
			climb = false
		} else {
			look = early{start: now.UnixNano(), end: b.Until.UnixNano()}
		}
		b.Until = look.next(p.cfg.bench.looks, now)
		d = b.Until.Sub(now)
	}
	if climb {
		b.Level++
	}
	if v.ofAccount() {
		b.Account = k.Account
	}
	p.storeResult(opBench, p.store.Bench(ctx, b))
	for _, o := range p.benchedBy(k, b) {
		if d >= carefulBench {
			o.returns.mark(model(b), b.Until, look)
		}
		extendTo(&o.benchedUntil, b.Until.UnixNano())
	}
	p.tel.benched(ctx, k, v.kind)
	if f := p.cfg.onEvict; f != nil || p.alarm != nil {
		ev := Eviction{Provider: p.provider, KeyID: k.ID, Model: model(b), Paid: k.Paid,
			Kind: v.kind, For: d, Until: b.Until}
		if look.end > b.Until.UnixNano() {
			ev.Latest = at(look.end, now)
		}
		if f != nil {
			f(ev)
		}
		p.alarm.set(ev, b.Account != "")
	}
	return b.Until
}

// An alarm calls a function (OnBenchEnd) at the end of each bench it is
// told of, in the order they end, on the clock benches are set by; a
// later bench of the same key and model replaces an earlier one. It holds
// one timer, armed for the soonest end, and at most one bench per key and
// model. It is safe for concurrent use; a nil alarm does nothing.
type alarm struct {
	clock func() time.Time
	ring  func(Eviction)

	mu      sync.Mutex // guards the fields below
	pending map[alarmScope]alarmEntry
	timer   *time.Timer
	next    time.Time // when the timer fires; zero when it is not armed
	stopped bool
}

// alarmScope is what a bench holds: a key (or a route, KeyID "") for a
// model, or for every model ("").
type alarmScope struct{ provider, key, model string }

// alarmEntry is a bench an alarm rings for, and whether it is its key's
// account's, which the key reported.
type alarmEntry struct {
	ev      Eviction
	account bool
}

// newAlarm returns the alarm of ring, nil for none.
func newAlarm(clock func() time.Time, ring func(Eviction)) *alarm {
	if ring == nil {
		return nil
	}
	return &alarm{clock: clock, ring: ring}
}

// set tells the alarm of bench e, of its key's account when account.
func (a *alarm) set(e Eviction, account bool) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := alarmScope{e.Provider, e.KeyID, e.Model}
	if old, ok := a.pending[s]; a.stopped || ok && !e.Until.After(old.ev.Until) {
		return
	}
	if a.pending == nil {
		a.pending = map[alarmScope]alarmEntry{}
	}
	a.pending[s] = alarmEntry{e, account}
	a.arm(e.Until)
}

// arm makes the timer fire at t, unless it fires sooner. a.mu is held.
func (a *alarm) arm(t time.Time) {
	if !a.next.IsZero() && !t.Before(a.next) {
		return
	}
	a.next = t
	d := max(t.Sub(a.clock()), 0)
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.fire)
		return
	}
	a.timer.Reset(d)
}

// fire rings for each bench that has ended, and arms the timer for the
// next. A clock behind the timer's (an injected one) finds none ended and
// arms it again for what its clock says is left.
func (a *alarm) fire() {
	a.mu.Lock()
	now := a.clock()
	var ended []Eviction
	var soonest time.Time
	for s, e := range a.pending {
		if !e.ev.Until.After(now) {
			ended = append(ended, e.ev)
			delete(a.pending, s)
		} else if soonest.IsZero() || e.ev.Until.Before(soonest) {
			soonest = e.ev.Until
		}
	}
	a.next = time.Time{}
	if !soonest.IsZero() && !a.stopped {
		a.arm(soonest)
	}
	a.mu.Unlock()
	slices.SortFunc(ended, func(x, y Eviction) int { return x.Until.Compare(y.Until) })
	for _, e := range ended {
		a.ring(e)
	}
}

// drop forgets the benches an operator lifted: every bench of the key
// keyID of provider (a route's, for ""), and the benches of its account
// that its mates reported (an account's keys share its benches, each
// reported by the key whose answer set it); a mate's own bench stays.
func (a *alarm) drop(provider, keyID string, mates []string) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for s, e := range a.pending {
		if s.provider == provider && (s.key == keyID || e.account && slices.Contains(mates, s.key)) {
			delete(a.pending, s)
		}
	}
}

// stop stops the alarm: no bench it was told of rings from then on.
func (a *alarm) stop() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stopped = true
	clear(a.pending)
	if a.timer != nil {
		a.timer.Stop()
	}
}

// benchedBy returns the keys a bench holds: the key, or every key of the
// account it benches.
func (p *Pool) benchedBy(k *poolKey, b Bench) []*poolKey {
	if b.Account == "" {
		return []*poolKey{k}
	}
	return p.accounts[b.Account]
}

// model returns the model a bench holds the key for: "" for every model.
func model(b Bench) string {
	if b.AllModels {
		return ""
	}
	return b.Model
}

// extendTo moves a time held in Unix nanoseconds to until, unless it is
// already as late, and reports whether it moved it.
func extendTo(a *atomic.Int64, until int64) bool {
	for {
		cur := a.Load()
		if until <= cur {
			return false
		}
		if a.CompareAndSwap(cur, until) {
			return true
		}
	}
}

// Eviction reports a benched key to OnEvict: which key, why, and for how
// long. Model is empty when the bench holds the key for every model.
type Eviction struct {
	Provider string
	KeyID    string
	Model    string
	Paid     bool
	Kind     Kind
	For      time.Duration
	Until    time.Time
	// Latest, when set, is the end of a quota bench that dates nothing
	// and is looked at early: at Until the key takes one request, which
	// ends the bench if it succeeds, and a look that fails is reported
	// again with the next look as its Until (Benches.EarlyLooks).
	Latest time.Time
}

// Reading reports to OnRateLimit what an answer said of a window: which
// window, how full (a fraction; 1 is full and more is real), and when it
// resets; and the limits the answer stated, which the pool learns (a zero
// field: not stated).
type Reading struct {
	Provider    string
	KeyID       string
	Model       string
	Window      Window
	Utilization float64
	ResetAt     time.Time
	Limits      Limits
}

// A key that comes back from a bench of a minute or more returns carefully:
// it takes one request at a time, for the model it was benched for (or for
// every model after a bench of the whole key), until one succeeds. Requests
// that find its one request under way go to other keys or wait, so a key
// the vendor still limits costs one refused request, not a burst of them.
// The care is this pool's: replicas sharing a store each send their own one
// request.

// carefulBench is the shortest bench after which a key returns carefully.
const carefulBench = time.Minute

// probeRetry is when a request that found a returning key's one request
// under way tries again, if no other key serves it.
const probeRetry = time.Second

// returns holds, for one key, the models it is returning for: "" stands for
// every model.
type returns struct {
	n       atomic.Int32 // len(byModel): 0 lets requests skip the lock
	mu      sync.Mutex   // guards byModel
	byModel map[string]*returning
}

// returning is one model's return: the bench it returns from ends at from
// (Unix nanoseconds), a request is under way while probing, and look is
// the early looks at the bench, when it is a quota that dates nothing.
type returning struct {
	from    int64
	probing bool
	look    early
}

// early is the early looks at a quota bench that dates nothing: the bench
// began at start and lasts at most until end (Unix nanoseconds), and looks
// have failed so far. Zero for a bench that is not looked at early.
type early struct {
	start, end int64
	looks      int
}

// next returns when the bench is next looked at, by the looks after its
// start: the first look not yet failed, or the bench's end after the last.
func (e early) next(looks []time.Duration, now time.Time) time.Time {
	end := e.end
	if e.looks < len(looks) {
		end = min(end, e.start+int64(looks[e.looks]))
	}
	return at(end, now)
}

// at returns the time of Unix nanoseconds ns in now's location.
func at(ns int64, now time.Time) time.Time { return now.Add(time.Duration(ns - now.UnixNano())) }

// looking returns the early looks of the bench the key returns from for
// model, when that bench is over and its end has not come: the answer
// now benching the key is a look that failed.
func (r *returns) looking(model string, now time.Time) (early, bool) {
	if r.n.Load() == 0 {
		return early{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := now.UnixNano()
	if s := r.byModel[model]; s != nil && s.from <= n && s.look.end > n {
		return s.look, true
	}
	return early{}, false
}

// mark notes that the key returns for model ("" for every model) once a
// bench ending at until is over, with the bench's early looks.
func (r *returns) mark(model string, until time.Time, look early) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byModel == nil {
		r.byModel = map[string]*returning{}
	}
	if s := r.byModel[model]; s != nil {
		s.from, s.look = max(s.from, until.UnixNano()), look
		return
	}
	if len(r.byModel) >= maxModelsPerKey {
		return // a bound on what clients can make the pool remember
	}
	r.byModel[model] = &returning{from: until.UnixNano(), look: look}
	r.n.Store(int32(len(r.byModel)))
}

// admit reports whether a request for model may go to the key at now, and
// whether it is the one request of a return (a probe). A request is refused
// while another is the probe of a return whose bench is over; the caller
// then retries at now + probeRetry.
func (r *returns) admit(model string, now time.Time) (ok, probe bool) {
	if r.n.Load() == 0 {
		return true, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := now.UnixNano()
	// The probe holds every return it meets, the model's and the whole
	// key's: a probe under way in either refuses the request.
	var hold [2]*returning
	for i, m := range [...]string{model, ""} {
		s := r.byModel[m]
		if s == nil || s.from > n {
			continue // no return, or a bench not over: the store refuses
		}
		if s.probing {
			return false, false
		}
		hold[i] = s
	}
	if hold[0] == nil && hold[1] == nil {
		return true, false
	}
	for _, s := range hold {
		if s != nil {
			s.probing = true
		}
	}
	return true, true
}

// done ends a probe for model: a success ends the return (and a return of
// every model), anything else lets the next request probe.
func (r *returns) done(model string, succeeded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range [...]string{model, ""} {
		if s := r.byModel[m]; s != nil {
			s.probing = false
			if succeeded {
				delete(r.byModel, m)
			}
		}
	}
	r.n.Store(int32(len(r.byModel)))
}
