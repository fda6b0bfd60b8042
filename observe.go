package keypool

import (
	"context"
	"sync/atomic"
	"time"
)

// observe records what an answer said of a lease's key — its count, the
// vendor's reading, the end of a climb up the quota levels on a success, a
// bench on a failure or on a success that says its window is spent — and
// returns when the key comes back if it was benched.
func (p *Pool) observe(ctx context.Context, l *lease, v *verdict, now time.Time) time.Time {
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
	if v.quoted {
		// Words the request could have written bench nothing until
		// another key serves the same request (confirm).
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
	if !v.reset.HasUtilization && v.reset.ResetAt.IsZero() && v.stated.limits == (Limits{}) {
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
	if !v.reset.exhausted(now) || limits != (Limits{}) && v.reset.ResetAt.Sub(now) <= longThrottle {
		return verdict{}
	}
	kind := KindRate
	if v.reset.Window != WindowNone || v.reset.ResetAt.Sub(now) > longThrottle {
		kind = KindQuota
	}
	return verdict{kind: kind, reset: v.reset}
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
	if climb {
		level++
	}
	b := Bench{Provider: p.provider, KeyID: k.ID, Model: m, AllModels: v.wholeKey(),
		Kind: v.kind, Until: now.Add(d), Level: level}
	if v.ofAccount() {
		b.Account = k.Account
	}
	p.storeResult(opBench, p.store.Bench(ctx, b))
	for _, o := range p.benchedBy(k, b) {
		if d >= carefulBench {
			o.returns.mark(model(b), b.Until)
		}
		extendTo(&o.benchedUntil, b.Until.UnixNano())
	}
	p.tel.benched(ctx, k, v.kind)
	if f := p.cfg.onEvict; f != nil {
		f(Eviction{Provider: p.provider, KeyID: k.ID, Model: model(b), Paid: k.Paid,
			Kind: v.kind, For: d, Until: b.Until})
	}
	return b.Until
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

// longThrottle is the longest wait a throttle of a short window takes; a
// spent window that lifts later is a quota.
const longThrottle = 10 * time.Minute

// exhausted reports that a reading says its binding window is full and
// dates when it resets.
func (r Reset) exhausted(now time.Time) bool {
	return r.HasUtilization && r.Utilization >= 1 && r.ResetAt.After(now)
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
