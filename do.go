package keypool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// Do calls fn with a key of the pool, in the same order, with the same
// windows and benches as the Transport, for clients that are not HTTP.
//
// When the pool has token limits or budgets, a call counts the pool's
// estimate for a request naming model (WithEstimator) until fn says what it
// used: fn calls Settle(ctx, input, output) with the context Do gave it,
// once the vendor has reported its usage. When fn never calls Settle, the
// estimate stands, and what the call reserved of a budget is spent. A call
// names no max_tokens: against a budget it reserves the model's
// Price.MaxOutput, or, without one, all that is left, and runs alone (see
// Budget).
//
// When fn returns an error that is (or wraps) a *ProviderError of a failing
// kind, the key is benched by that error and, if another key can take the
// call, fn is called again with it, each key at most once — but a second
// KindTransient of one call benches nothing and is returned, as the
// Transport's second 5xx is; a failed call counts no tokens. Any other
// error benches nothing and is returned as is.
// When no key can take the call, Do returns a *NoAvailableKeyError that also
// wraps the last error of fn.
func (p *Pool) Do(ctx context.Context, model string, fn func(ctx context.Context, k Key) error) error {
	if err := windowspec.CheckModel(model); err != nil {
		return fmt.Errorf("keypool: %s: %w", p.provider, err)
	}
	var est usageReport
	if p.usable() == nil && p.needTokens() {
		info := RequestInfo{Model: model}
		est = estimateUse(info, max(p.cfg.estimator(info), 0))
	}
	var c call
	var last error
	used := &doUsage{}
	fctx := context.WithValue(ctx, doUsageKey{}, used)
	for attempt := 0; ; attempt++ {
		var l lease
		if err := p.take(ctx, &c, model, est, &l); err != nil {
			var na *NoAvailableKeyError
			if errors.As(err, &na) && last != nil {
				na.last = last
			}
			return err
		}
		l.key.sent.Add(1)
		*used = doUsage{}
		err := p.run(fctx, fn, &l)
		now := p.cfg.clock()
		v := verdictOf(err, now)
		c.badMoment(&v)
		until := p.observe(ctx, &l, &v, now)
		c.sooner(until)
		if p.cfg.onAttempt != nil {
			var pe *ProviderError
			p.tellAttempt(ctx, Attempt{KeyID: l.key.ID, Model: model, Failover: attempt, Kind: v.kind, Bench: benchLength(until, now)},
				err != nil && !errors.As(err, &pe)) // an error that is no vendor's answer
		}
		ch := l.charge()
		switch {
		case v.kind != KindNone && !p.single() && !v.again:
			p.settle(ctx, &ch, usageReport{})
			c.tried.add(l.key.index)
			last = err
			continue
		case v.kind != KindNone:
			p.settle(ctx, &ch, usageReport{})
		case used.settled:
			u := p.settle(ctx, &ch, used.usageReport)
			if p.needTokens() {
				p.counted(ctx, l.key, ch.model, u.total())
			}
		default:
			p.standEstimate(ctx, &ch)
		}
		return err
	}
}

// Settle tells the pool, from inside the function Pool.Do calls, how many
// tokens the call used, as the vendor reported them: input (cached input
// included) and output (reasoning included). ctx is the context Do gave the
// function. The last call counts. Outside Pool.Do it does nothing.
func Settle(ctx context.Context, input, output int64) {
	if u, ok := ctx.Value(doUsageKey{}).(*doUsage); ok {
		u.usageReport = usageReport{input: max(input, 0), output: max(output, 0)}
		u.settled = true
	}
}

// doUsage is what the function of one Pool.Do attempt settled.
type doUsage struct {
	usageReport
	settled bool
}

type doUsageKey struct{}

// verdictOf reads the verdict of an error from Pool.Do's function at now.
func verdictOf(err error, now time.Time) verdict {
	var pe *ProviderError
	if err == nil || !errors.As(err, &pe) {
		return verdict{}
	}
	v := verdict{kind: pe.Kind, billing: pe.Kind == KindQuota && pe.Status == 402}
	v.reset = Reset{RetryAfter: pe.RetryAfter, HasRetryAfter: pe.RetryAfter > 0, ResetAt: pe.ResetAt, Window: pe.Window}
	if v.reset.ResetAt.IsZero() && v.reset.HasRetryAfter {
		v.reset.ResetAt = now.Add(pe.RetryAfter)
	}
	return v
}

// run calls fn with the lease's key and lands the lease when it returns,
// or when it panics: a function that panics gives its key's place back.
func (p *Pool) run(ctx context.Context, fn func(context.Context, Key) error, l *lease) error {
	returned := false
	defer func() {
		if !returned {
			// fn panicked: a probe it held ends, or the key's return
			// would wait for it for good.
			p.probed(l, false)
		}
		p.landLease(l)
	}()
	err := fn(ctx, l.key.Key)
	returned = true
	return err
}
