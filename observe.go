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
func (p *Pool) observe(ctx context.Context, l *lease, v verdict, now time.Time) time.Time {
	l.key.answers[v.kind].Add(1)
	p.tel.answered(ctx, l.key, v)
	p.noteReading(l, v, now)
	if p.single() {
		return time.Time{}
	}
	if v.kind == KindNone {
		p.succeeded(ctx, l)
		v = spentWindow(v, l.claim.Limits, now)
		if v.kind == KindNone {
			return time.Time{}
		}
	}
	return p.bench(ctx, l, v, now)
}

// noteReading keeps what an answer said of the key's windows as its last
// reading, and tells OnRateLimit when the answer names a window.
func (p *Pool) noteReading(l *lease, v verdict, now time.Time) {
	if !v.reset.HasUtilization && v.reset.ResetAt.IsZero() {
		return
	}
	r := Reading{Provider: p.provider, KeyID: l.key.ID, Model: l.claim.Model,
		Window: v.reset.Window, Utilization: v.reset.Utilization, ResetAt: v.reset.ResetAt}
	l.key.lastMu.Lock()
	l.key.last, l.key.lastAt = r, now
	l.key.lastMu.Unlock()
	if f := p.cfg.onRateLimit; f != nil && v.reset.Window != WindowNone {
		f(r)
	}
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
// A key whose limits the pool was told needs none of this: its own windows
// refuse until the next slot frees, where a vendor's reset (OpenAI's: until
// the window is whole again) would idle it longer.
func spentWindow(v verdict, limits Limits, now time.Time) verdict {
	if !v.reset.exhausted(now) || limits != (Limits{}) {
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
func (p *Pool) bench(ctx context.Context, l *lease, v verdict, now time.Time) time.Time {
	d, climb := p.cfg.bench.benchFor(v, l.grant.Level, now)
	level := l.grant.Level
	if climb {
		level++
	}
	b := Bench{Provider: p.provider, KeyID: l.key.ID, Model: l.claim.Model, AllModels: v.wholeKey(),
		Kind: v.kind, Until: now.Add(d), Level: level}
	p.storeResult(opBench, p.store.Bench(ctx, b))
	p.tel.benched(ctx, l.key, v.kind)
	extendTo(&l.key.benchedUntil, b.Until.UnixNano())
	if f := p.cfg.onEvict; f != nil {
		model := b.Model
		if b.AllModels {
			model = ""
		}
		f(Eviction{Provider: p.provider, KeyID: l.key.ID, Model: model, Paid: l.key.Paid,
			Kind: v.kind, For: d, Until: b.Until})
	}
	return b.Until
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
// resets.
type Reading struct {
	Provider    string
	KeyID       string
	Model       string
	Window      Window
	Utilization float64
	ResetAt     time.Time
}
