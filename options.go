package keypool

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// An Option configures a Pool (New), a Fallback (NewFallback) or a
// BadgerStore (OpenBadgerStore); each option's doc says which. Options that
// take a function or an interface ignore nil, keeping the default; a bad
// value, or an option given to what it does not configure, is an error from
// the function it was given to.
type Option interface {
	apply(*config)
}

// scope is what an option configures.
type scope uint8

const (
	forPool scope = 1 << iota
	forFallback
	forBadger
)

func (s scope) String() string {
	switch s {
	case forFallback:
		return "Fallback"
	case forBadger:
		return "BadgerStore"
	}
	return "Pool"
}

// option is an Option: its name for errors, what it configures, and what it
// sets.
type option struct {
	name  string
	scope scope
	set   func(*config) error
}

func (o option) apply(c *config) {
	if o.scope&c.scope == 0 {
		c.errs = append(c.errs, fmt.Errorf("%s does not configure a %s", o.name, c.scope))
		return
	}
	if err := o.set(c); err != nil {
		c.errs = append(c.errs, fmt.Errorf("%s: %w", o.name, err))
	}
}

func poolOption(name string, set func(*config) error) Option {
	return option{name: name, scope: forPool, set: set}
}

// config is a pool's or a fallback's configuration: every default lives in
// newConfig.
type config struct {
	scope          scope // what is being configured
	clock          func() time.Time
	store          Store
	limits         Limits
	modelLimits    map[string]Limits
	keyCap         Limits
	days           calendar
	onEvict        func(Eviction)
	onRateLimit    func(Reading)
	onStoreError   func(error)
	onRoute        func(RouteEvent)
	onAttempt      func(context.Context, Attempt)
	onSettle       func(Settlement)
	onBenchEnd     func(Eviction)
	auth           auth
	modelFunc      func(*http.Request) string
	affinity       affinityConfig
	estimator      func(RequestInfo) int64
	bench          benchPolicy
	wait           time.Duration   // the longest a request waits for a key; 0 is not at all
	hosts          map[string]bool // hostKey of each host keys may go to; none is the first host of each request
	accountLimits  map[string]Limits
	accountBudgets map[string]Budget
	prices         map[string]*Price // by model; a lease and a charge point at them
	prev           *Pool             // the pool this one takes over from (TakeOver), or nil

	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider

	badger badgerConfig // a BadgerStore's

	errs []error // from options
}

// newConfig returns the configuration opts make for s, or an error naming
// each bad option.
func newConfig(opts []Option, s scope) (config, error) {
	c := config{
		scope:     s,
		clock:     time.Now,
		auth:      auth{style: authHeader, name: "Authorization", prefix: "Bearer "},
		estimator: DefaultEstimate,
		bench:     defaultBenchPolicy(),
		badger:    defaultBadgerConfig(),
		affinity:  affinityConfig{size: DefaultAffinityConversations, idle: DefaultAffinityIdle},
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	return c, errors.Join(c.errs...)
}

// WithClock sets the clock of a Pool or a Fallback. The default is
// time.Now. Tests inject a clock to drive windows and benches without
// sleeping.
func WithClock(now func() time.Time) Option {
	return option{name: "WithClock", scope: forPool | forFallback, set: func(c *config) error {
		if now != nil {
			c.clock = now
		}
		return nil
	}}
}

// OnRoute sets a function a Fallback tells how each request was routed. It
// is called from the request's goroutine and should return quickly.
func OnRoute(f func(RouteEvent)) Option {
	return option{name: "OnRoute", scope: forFallback, set: func(c *config) error {
		if f != nil {
			c.onRoute = f
		}
		return nil
	}}
}

// OnBenchEnd sets a function called when a bench ends: for a Pool, the
// Eviction OnEvict reported, once its Until has come (a later bench of the
// same key and model replaces it; one that Pool.Unbench lifted is not
// reported); for a Fallback, a route's bench, as an Eviction whose
// Provider is the route's name and whose KeyID is "". It is called from a
// timer's goroutine, in the order the benches end, so a key comes back in
// the log even when no request comes; it should return quickly.
func OnBenchEnd(f func(Eviction)) Option {
	return option{name: "OnBenchEnd", scope: forPool | forFallback, set: func(c *config) error {
		c.onBenchEnd = f
		return nil
	}}
}

// WithStore sets where a Pool keeps its windows and benches. The default is
// a new MemoryStore. The pool never closes a store it was given: Pool.Close
// flushes it, and whoever opened it closes it.
func WithStore(s Store) Option {
	return poolOption("WithStore", func(c *config) error {
		if s != nil {
			c.store = s
		}
		return nil
	})
}

// WithLimits sets a Pool's limits of every key for each model: requests and
// tokens per minute and per day. A zero field sets no limit on that axis.
// Model limits (WithModelLimits) and a key's own Limits override it field by
// field.
func WithLimits(l Limits) Option {
	return poolOption("WithLimits", func(c *config) error {
		c.limits = l
		return l.validate()
	})
}

// WithModelLimits sets a Pool's limits per model, overriding WithLimits field
// by field for the models it names: vendors set most limits per model. A
// key's own Limits override these in turn.
func WithModelLimits(m map[string]Limits) Option {
	return poolOption("WithModelLimits", func(c *config) error {
		c.modelLimits = make(map[string]Limits, len(m))
		for model, l := range m {
			if err := l.validate(); err != nil {
				return fmt.Errorf("model %q: %w", model, err)
			}
			if l.InFlight != 0 {
				return fmt.Errorf("model %q: InFlight bounds a key or an account, not a model", model)
			}
			c.modelLimits[model] = l
		}
		return nil
	})
}

// WithAccountLimits sets the limits of an account (Key.Account): every key
// naming it shares one set of windows per model, with these limits over the
// pool's and the model's (WithLimits, WithModelLimits), field by field.
// Vendors scope limits to an organisation or a project; when an account's
// limits are not set, the pool learns them from the vendor's answers.
func WithAccountLimits(account string, l Limits) Option {
	return poolOption("WithAccountLimits", func(c *config) error {
		if account == "" {
			return errors.New("needs an account's name")
		}
		if err := checkName("account", account); err != nil {
			return err
		}
		if c.accountLimits == nil {
			c.accountLimits = map[string]Limits{}
		}
		c.accountLimits[account] = l
		return l.validate()
	})
}

// WithPrices sets what models cost, by the model a request names, in US
// dollars per million tokens: what each request spends — estimated before
// it is sent, settled from the usage the vendor reports — is held against
// the budgets of keys (Key.Budget) and accounts (WithAccountBudget), and
// measured (the keypool.spend metric). A model without a price is never
// sent to a key with a budget.
func WithPrices(prices map[string]Price) Option {
	return poolOption("WithPrices", func(c *config) error {
		c.prices = make(map[string]*Price, len(prices))
		for model, p := range prices {
			if err := p.validate(); err != nil {
				return fmt.Errorf("model %q: %w", model, err)
			}
			c.prices[model] = &p
		}
		return nil
	})
}

// WithAccountBudget caps what an account's keys (Key.Account) spend
// together, by the prices of WithPrices: see Budget.
func WithAccountBudget(account string, b Budget) Option {
	return poolOption("WithAccountBudget", func(c *config) error {
		if account == "" {
			return errors.New("needs an account's name")
		}
		if err := checkName("account", account); err != nil {
			return err
		}
		if c.accountBudgets == nil {
			c.accountBudgets = map[string]Budget{}
		}
		c.accountBudgets[account] = b
		return b.validate()
	})
}

// WithKeyCap sets limits that each key of a Pool has across all its models
// together, beside its per-model limits: for instance the daily request cap
// of a free tier that counts every model.
func WithKeyCap(l Limits) Option {
	return poolOption("WithKeyCap", func(c *config) error {
		if l.InFlight != 0 {
			return errors.New("InFlight bounds a key in WithLimits or Key.Limits, not its cap of windows")
		}
		c.keyCap = l
		return l.validate()
	})
}

// WithCalendarDay makes a Pool's day windows (RPD, TPD) calendar days that
// reset at hour o'clock in loc, as vendors that reset at midnight Pacific
// time do. The default is a day that slides over the last 24 hours. A nil loc
// is UTC.
func WithCalendarDay(hour int, loc *time.Location) Option {
	return poolOption("WithCalendarDay", func(c *config) error {
		if hour < 0 || hour > 23 {
			return fmt.Errorf("hour %d is not in 0..23", hour)
		}
		if loc == nil {
			loc = time.UTC
		}
		c.days = calendar{hour: hour, loc: loc}
		return nil
	})
}

// OnEvict sets a function a Pool calls each time a key is benched, after the
// bench is recorded. It is called from the goroutine of the request that
// caused the bench, possibly from several at once, and should return
// quickly.
func OnEvict(f func(Eviction)) Option {
	return poolOption("OnEvict", func(c *config) error {
		if f != nil {
			c.onEvict = f
		}
		return nil
	})
}

// OnRateLimit sets a function a Pool calls once per answer — successes
// included — whenever the answer reports a window (Reading.Window is never
// empty), so a caller can warn when a window is 90% full. An account that
// reports no window never triggers it. It is called from the request's
// goroutine and should return quickly.
func OnRateLimit(f func(Reading)) Option {
	return poolOption("OnRateLimit", func(c *config) error {
		if f != nil {
			c.onRateLimit = f
		}
		return nil
	})
}

// OnStoreError sets a function a Pool tells when its store starts failing —
// a call that returned an error, or a store whose Health method reports one
// (the BadgerStore's writes behind, a Redis server that stopped answering) —
// and, with nil, when it works again: once per spell, not once per call. A
// spell ends when every kind of call that failed (taking a key, benching
// one, settling tokens, the store's health) has succeeded again. The pool
// keeps serving what it can meanwhile. It is called from a request's
// goroutine and should return quickly. By default failures are not reported.
func OnStoreError(f func(error)) Option {
	return poolOption("OnStoreError", func(c *config) error {
		if f != nil {
			c.onStoreError = f
		}
		return nil
	})
}

// WithHosts pins a Pool to its vendor's hosts: keys go only on requests to
// them, and a request sent to any other host fails at once, with no key
// and nothing sent. A host is a name with or without a port
// ("api.openai.com", "localhost:8080"); without one it stands for both
// default ports. Without WithHosts a key goes only to the host each request
// was first sent to. Either way a redirect to another host is followed
// without a key — as net/http does with credentials — and no caller's
// CheckRedirect is needed to keep keys safe.
func WithHosts(hosts ...string) Option {
	return poolOption("WithHosts", func(c *config) error {
		if len(hosts) == 0 {
			return errors.New("needs at least one host")
		}
		c.hosts = map[string]bool{}
		for _, h := range hosts {
			keys, err := parseHost(h)
			if err != nil {
				return err
			}
			for _, k := range keys {
				c.hosts[k] = true
			}
		}
		return nil
	})
}

// BearerAuth makes a Pool put a key on a request as "Authorization: Bearer
// <key>", as OpenAI and most OpenAI-compatible vendors expect. It is the
// default.
func BearerAuth() Option {
	return poolOption("BearerAuth", func(c *config) error {
		c.auth = auth{style: authHeader, name: "Authorization", prefix: "Bearer "}
		return nil
	})
}

// HeaderAuth makes a Pool put a key on a request as the value of the header
// name, as Anthropic ("x-api-key") and Gemini ("x-goog-api-key") expect.
func HeaderAuth(name string) Option {
	return poolOption("HeaderAuth", func(c *config) error {
		if name == "" {
			return errors.New("needs a header name")
		}
		c.auth = auth{style: authHeader, name: http.CanonicalHeaderKey(name)}
		return nil
	})
}

// QueryAuth makes a Pool put a key on a request as the URL query parameter
// param, as Gemini's "key" parameter.
func QueryAuth(param string) Option {
	return poolOption("QueryAuth", func(c *config) error {
		if param == "" {
			return errors.New("needs a parameter name")
		}
		c.auth = auth{style: authQuery, name: param, prefix: url.QueryEscape(param) + "="}
		return nil
	})
}

// WithModelFunc sets how a Pool finds a request's model. The default reads
// the model from the URL path (Gemini, Azure OpenAI) or from the JSON body's
// "model" field (OpenAI, Anthropic).
func WithModelFunc(f func(*http.Request) string) Option {
	return poolOption("WithModelFunc", func(c *config) error {
		if f != nil {
			c.modelFunc = f
		}
		return nil
	})
}

// affinityConfig is how a pool keeps conversations on keys (see
// WithAffinity).
type affinityConfig struct {
	of   func(*http.Request) string // nil: the request's own fields name it
	size int                        // 0: conversations do not stay on keys
	idle time.Duration
}

// OnAttempt sets a function a Pool calls after each attempt of a request on
// a key — through its Transport, and each call of Pool.Do's function — with
// the request's context and what the attempt came to: the key, the model,
// its place among the request's attempts, the answer's status and kind, the
// bench it set. It runs on the request's goroutine, before the answer goes
// on: it must be quick. It never carries a secret. A panic in it (or in
// OnEvict, or in Pool.Do's function) reaches the caller after the key's
// place among its requests in flight is given back.
func OnAttempt(f func(context.Context, Attempt)) Option {
	return poolOption("OnAttempt", func(c *config) error {
		c.onAttempt = f
		return nil
	})
}

// OnSettle sets a function a Pool calls each time it counts the tokens an
// answer reported it used: as the caller finishes reading a successful
// body through its Transport, or as Pool.Do's function returns after
// Settle. A pool counts tokens only when it needs them — a token limit,
// configured or learned, or a price — so without either it never calls f.
// It runs on the goroutine that read the body: it must be quick. It never
// carries a secret.
func OnSettle(f func(Settlement)) Option {
	return poolOption("OnSettle", func(c *config) error {
		c.onSettle = f
		return nil
	})
}

// WithAffinity sets how a Pool names a request's conversation, which it keeps
// on the key that served it while that key can take its requests, so that
// the vendor's prompt cache holds the conversation's prefix: f's answer,
// when it is not "". By default — and where f says "" — a request names its
// conversation by its X-Session-Id header, else its JSON body's
// prompt_cache_key (OpenAI), metadata.user_id (Anthropic) or user
// (OpenAI), in that order. A conversation stays on its key within the
// key's tier (Key.Priority, free before paid): a conversation that moved
// to a paid key while the free ones were full comes back to a free one.
// When its key is benched or cannot take the request, the request goes to
// the next key in order, and the conversation stays on that one from then.
// A body is read for a conversation only when the pool reads it anyway
// (for its model or its tokens). See WithAffinityMemory for how many
// conversations a pool keeps.
//
// An OpenAI Responses request whose body names a previous_response_id or
// a conversation (its ID, or an object's "id") goes to the key whose
// answer made that ID: the vendor keeps responses and conversations for
// the organisation whose key made them, and refuses another's (400
// previous_response_not_found). These names outrank f's and the header's,
// and one stays on the key that made it even when a request naming it had
// to go to another. The pool reads the ID (resp_…, conv_…) of each answer
// to a POST to /responses or /conversations as the caller reads the body;
// with a store that shares conversations it tells the store at once.
func WithAffinity(f func(*http.Request) string) Option {
	return poolOption("WithAffinity", func(c *config) error {
		c.affinity.of = f
		return nil
	})
}

// WithAffinityMemory sets how many conversations a Pool keeps on their keys
// (the least recently served go first when there are more) — as many of
// the names requests give as of the response and conversation IDs answers
// made (see WithAffinity), each kind apart — and for how
// long after its last request a conversation stays (a vendor's prompt
// cache lasts minutes to an hour). The defaults are
// DefaultAffinityConversations and DefaultAffinityIdle; conversations 0
// turns affinity off. With a store that shares
// conversations among replicas (AffinityStore, such as redisstore's), a
// conversation stays on one key in every replica.
func WithAffinityMemory(conversations int, idle time.Duration) Option {
	return poolOption("WithAffinityMemory", func(c *config) error {
		switch {
		case conversations < 0:
			return fmt.Errorf("%d conversations is negative", conversations)
		case conversations > 0 && idle <= 0:
			return fmt.Errorf("an idle time of %v is not positive", idle)
		}
		c.affinity.size, c.affinity.idle = conversations, idle
		return nil
	})
}

// TakeOver makes the new Pool take over from prev, a Pool of the same
// provider that it replaces while prev finishes what it has under way — a
// proxy's reload of its keys:
//   - For each key of the same secret in both, under any ID, the requests
//     prev holds count against the new pool's in-flight cap
//     (Limits.InFlight) until they end, when both pools cap the key; so do
//     an account's, by the account's name, against its cap. A place either
//     pool gives back wakes the other's waiting requests. Each pool admits
//     by its own cap: a lower new one holds once prev's requests end.
//   - The conversations prev keeps on keys (WithAffinity) stay on the keys
//     of the same secrets, else of the same IDs, and an ID that an answer
//     prev is still reading makes reaches the new pool too.
//
// Benches and windows need no taking over: they are the store's, which
// both share when given the same (WithStore). The new pool does not keep
// prev alive. New refuses a prev of another provider, and a closed one.
// Close prev when its requests have ended.
func TakeOver(prev *Pool) Option {
	return poolOption("TakeOver", func(c *config) error {
		c.prev = prev
		return nil
	})
}

// WithEstimator sets how a Pool estimates a request's tokens before it is
// sent, when a token limit applies. The default is DefaultEstimate; wrap it
// to adjust it.
func WithEstimator(f func(RequestInfo) int64) Option {
	return poolOption("WithEstimator", func(c *config) error {
		if f != nil {
			c.estimator = f
		}
		return nil
	})
}

// Benches say how long each kind of failure benches a key when its answer
// does not date when the limit lifts (an answer that does benches the key
// until then). A zero field keeps its default.
type Benches struct {
	// Rate is the bench of a throttle: 1 minute.
	Rate time.Duration
	// Transient is the bench of a server error without a Retry-After:
	// 1 minute.
	Transient time.Duration
	// Auth is the bench of a revoked or unauthorized key: 12 hours.
	Auth time.Duration
	// Billing is the bench of a spent balance or credit, or a 402:
	// 12 hours.
	Billing time.Duration
	// QuotaLevels are the benches of repeated quota answers: the first
	// benches for QuotaLevels[0], the next for QuotaLevels[1] and so on,
	// staying on the last; a success starts again at the first. Default:
	// 2 minutes, 10 minutes, 1 hour, 12 hours.
	QuotaLevels []time.Duration
	// EarlyLooks are when, after it began, a quota bench that dates
	// nothing (a level of QuotaLevels, or Billing) is looked at early:
	// at each, the key takes one request, and the first that succeeds
	// ends the bench. A look that fails keeps the bench to the next look,
	// and after the last to its end. Default: 5, 10, 20 and 30 minutes,
	// 1, 2, 4 and 8 hours. Looks must rise; a look at or after the
	// bench's end is not taken.
	EarlyLooks []time.Duration
	// Max is the longest bench of any kind, dated or not: 12 hours. No
	// bench is shorter than a second.
	Max time.Duration
}

// WithBenches sets how long a Pool benches a key for each kind of failure
// (see Benches). A negative duration, a Max under a second, or a quota level
// that is not positive is an error.
func WithBenches(b Benches) Option {
	return poolOption("WithBenches", func(c *config) error {
		for _, d := range []time.Duration{b.Rate, b.Transient, b.Auth, b.Billing, b.Max} {
			if d < 0 {
				return fmt.Errorf("negative bench %v", d)
			}
		}
		if b.Max != 0 && b.Max < time.Second {
			return fmt.Errorf("the longest bench, %v, is shorter than one second", b.Max)
		}
		for _, d := range b.QuotaLevels {
			if d <= 0 {
				return fmt.Errorf("quota level %v is not positive", d)
			}
		}
		for i, d := range b.EarlyLooks {
			if d <= 0 || i > 0 && d <= b.EarlyLooks[i-1] {
				return fmt.Errorf("early look %v is not positive and later than the one before", d)
			}
		}
		set := func(dst *time.Duration, d time.Duration) {
			if d != 0 {
				*dst = d
			}
		}
		set(&c.bench.rate, b.Rate)
		set(&c.bench.transient, b.Transient)
		set(&c.bench.auth, b.Auth)
		set(&c.bench.billing, b.Billing)
		set(&c.bench.max, b.Max)
		if len(b.QuotaLevels) > 0 {
			c.bench.levels = append([]time.Duration(nil), b.QuotaLevels...)
		}
		if len(b.EarlyLooks) > 0 {
			c.bench.looks = append([]time.Duration(nil), b.EarlyLooks...)
		}
		return nil
	})
}

// WithTracerProvider sets where a Pool's spans go: one span per attempt,
// named "keypool.attempt". The default is the global provider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return poolOption("WithTracerProvider", func(c *config) error {
		if tp != nil {
			c.tracerProvider = tp
		}
		return nil
	})
}

// WithMeterProvider sets where a Pool's metrics go. The default is the
// global provider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return poolOption("WithMeterProvider", func(c *config) error {
		if mp != nil {
			c.meterProvider = mp
		}
		return nil
	})
}

// WaitForKey makes a Pool's request that finds no key available wait — up
// to max, and no longer than its context allows — for the soonest key to
// come back, instead of failing at once. Requests for one model wait in
// arrival order. A request that every key has failed waits too: when the
// soonest bench ends it tries every key again. When the soonest key returns
// later than max allows, the request fails at once with a
// *NoAvailableKeyError; when the pool is closed, every waiting request
// fails at once. The default is not to wait.
func WaitForKey(max time.Duration) Option {
	return poolOption("WaitForKey", func(c *config) error {
		if max < 0 {
			return fmt.Errorf("%v is negative", max)
		}
		c.wait = max
		return nil
	})
}
