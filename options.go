package keypool

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures a Pool. Options that take a function or an interface
// ignore nil, keeping the default.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is a pool's configuration: every default lives in newConfig.
type config struct {
	clock       func() time.Time
	store       Store
	limits      Limits
	modelLimits map[string]Limits
	keyCap      Limits
	days        Calendar
	onEvict     func(Eviction)
	onRateLimit func(Reading)
	auth        auth
	modelFunc   func(*http.Request) string
	estimator   func(RequestInfo) int64
	bench       benchPolicy
	wait        time.Duration // the longest a request waits for a key; 0 is not at all

	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider

	errs []error // from options, reported by New
}

func newConfig(opts []Option) config {
	c := config{
		clock:     time.Now,
		auth:      auth{style: authHeader, name: "Authorization", prefix: "Bearer "},
		estimator: DefaultEstimate,
		bench:     defaultBenchPolicy(),
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c
}

// WithClock sets the pool's clock. The default is time.Now. Tests inject a
// clock to drive windows and benches without sleeping.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now != nil {
			c.clock = now
		}
	})
}

// WithStore sets where the pool keeps its windows and benches. The default is
// a new MemoryStore. The pool never closes a store it was given: Pool.Close
// flushes it, and whoever opened it closes it.
func WithStore(s Store) Option {
	return optionFunc(func(c *config) {
		if s != nil {
			c.store = s
		}
	})
}

// WithLimits sets the limits of every key for each model: requests and tokens
// per minute and per day. A zero field sets no limit on that axis. Model
// limits (WithModelLimits) and a key's own Limits override it field by field.
func WithLimits(l Limits) Option {
	return optionFunc(func(c *config) { c.limits = l })
}

// WithModelLimits sets limits per model, overriding WithLimits field by field
// for the models it names: vendors set most limits per model. A key's own
// Limits override these in turn.
func WithModelLimits(m map[string]Limits) Option {
	return optionFunc(func(c *config) {
		c.modelLimits = make(map[string]Limits, len(m))
		for model, l := range m {
			c.modelLimits[model] = l
		}
	})
}

// WithKeyCap sets limits that each key has across all its models together,
// beside its per-model limits: for instance the daily request cap of a free
// tier that counts every model.
func WithKeyCap(l Limits) Option {
	return optionFunc(func(c *config) { c.keyCap = l })
}

// WithCalendarDay makes day windows (RPD, TPD) calendar days that reset at
// hour o'clock in loc, as vendors that reset at midnight Pacific time do. The
// default is a day that slides over the last 24 hours. A nil loc is UTC.
func WithCalendarDay(hour int, loc *time.Location) Option {
	return optionFunc(func(c *config) {
		if hour < 0 || hour > 23 {
			c.errs = append(c.errs, fmt.Errorf("calendar day hour %d is not in 0..23", hour))
			return
		}
		if loc == nil {
			loc = time.UTC
		}
		c.days = Calendar{Hour: hour, Loc: loc}
	})
}

// OnEvict sets a function called each time a key is benched, after the bench
// is recorded. It is called from the goroutine of the request that caused
// the bench, possibly from several at once, and should return quickly.
func OnEvict(f func(Eviction)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.onEvict = f
		}
	})
}

// OnRateLimit sets a function called once per answer — successes included —
// whenever the answer reports a window (Reading.Window is never empty), so a
// caller can warn when a window is 90% full. An account that reports no
// window never triggers it. It is called from the request's goroutine and
// should return quickly.
func OnRateLimit(f func(Reading)) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.onRateLimit = f
		}
	})
}

// BearerAuth puts a key on a request as "Authorization: Bearer <key>", as
// OpenAI and most OpenAI-compatible vendors expect. It is the default.
func BearerAuth() Option {
	return optionFunc(func(c *config) {
		c.auth = auth{style: authHeader, name: "Authorization", prefix: "Bearer "}
	})
}

// HeaderAuth puts a key on a request as the value of the header name, as
// Anthropic ("x-api-key") and Gemini ("x-goog-api-key") expect.
func HeaderAuth(name string) Option {
	return optionFunc(func(c *config) {
		if name == "" {
			c.errs = append(c.errs, fmt.Errorf("HeaderAuth needs a header name"))
			return
		}
		c.auth = auth{style: authHeader, name: http.CanonicalHeaderKey(name)}
	})
}

// QueryAuth puts a key on a request as the URL query parameter param, as
// Gemini's "key" parameter.
func QueryAuth(param string) Option {
	return optionFunc(func(c *config) {
		if param == "" {
			c.errs = append(c.errs, fmt.Errorf("QueryAuth needs a parameter name"))
			return
		}
		c.auth = auth{style: authQuery, name: param, prefix: url.QueryEscape(param) + "="}
	})
}

// WithModelFunc sets how the pool finds a request's model. The default reads
// the model from the URL path (Gemini, Azure OpenAI) or from the JSON body's
// "model" field (OpenAI, Anthropic).
func WithModelFunc(f func(*http.Request) string) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.modelFunc = f
		}
	})
}

// WithEstimator sets how the pool estimates a request's tokens before it is
// sent, when a token limit applies. The default is DefaultEstimate; wrap it
// to adjust it.
func WithEstimator(f func(RequestInfo) int64) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.estimator = f
		}
	})
}

// WithBench sets how long an answer of kind k benches a key when the answer
// says nothing of when its limit lifts: by default 1 minute for KindRate and
// KindTransient, 12 hours for KindAuth. For KindQuota it sets the bench of a
// billing condition (a spent balance, a 402), 12 hours by default; a quota
// answer without a date and without a billing condition climbs the ladder of
// WithQuotaLadder instead.
func WithBench(k Kind, d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.errs = append(c.errs, fmt.Errorf("bench for %s must be positive, not %v", k, d))
			return
		}
		switch k {
		case KindRate:
			c.bench.rate = d
		case KindQuota:
			c.bench.billing = d
		case KindAuth:
			c.bench.auth = d
		case KindTransient:
			c.bench.transient = d
		default:
			c.errs = append(c.errs, fmt.Errorf("no bench for kind %s", k))
		}
	})
}

// WithQuotaLadder sets the benches of repeated quota answers that give no
// date: the first hit benches for steps[0], the next for steps[1], and so on,
// staying on the last step; a success starts the ladder again. The default
// is 2 minutes, 10 minutes, 1 hour, 12 hours.
func WithQuotaLadder(steps ...time.Duration) Option {
	return optionFunc(func(c *config) {
		if len(steps) == 0 {
			c.errs = append(c.errs, fmt.Errorf("quota ladder needs at least one step"))
			return
		}
		for _, d := range steps {
			if d <= 0 {
				c.errs = append(c.errs, fmt.Errorf("quota ladder step %v must be positive", d))
				return
			}
		}
		c.bench.ladder = append([]time.Duration(nil), steps...)
	})
}

// WithMaxBench sets the longest bench, 12 hours by default. No bench is
// shorter than one second.
func WithMaxBench(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Second {
			c.errs = append(c.errs, fmt.Errorf("max bench %v is shorter than one second", d))
			return
		}
		c.bench.max = d
	})
}

// WithTracerProvider sets where the pool's spans go: one span per attempt,
// named "keypool.attempt". The default is the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracerProvider = tp
		}
	})
}

// WithMeterProvider sets where the pool's metrics go. The default is the
// global provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// WaitForKey makes a request that finds no key available wait — up to max,
// and no longer than its context allows — for the soonest key to come back,
// instead of failing at once. Requests for one model wait in arrival order.
// When the soonest key returns later than max allows, the request fails at
// once with a *NoAvailableKeyError. The default is not to wait.
func WaitForKey(max time.Duration) Option {
	return optionFunc(func(c *config) {
		if max < 0 {
			c.errs = append(c.errs, fmt.Errorf("WaitForKey(%v): must not be negative", max))
			return
		}
		c.wait = max
	})
}
