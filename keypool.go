// Package keypool turns several API keys for one vendor into one dependable
// client.
//
// A Pool holds the keys. Its Transport is an [http.RoundTripper] that goes
// into any [http.Client] — and so under vendor SDKs and go-retryablehttp. For
// each request it picks a key (by Key.Priority; within one, free keys
// round-robin, paid keys only when no free key can take the request), puts the key on the request, refuses what
// the key's request and token windows cannot take before sending it, reads
// the vendor's answer for rate-limit signals, and benches a failing key for
// as long as its failure deserves: a throttle for seconds, a spent weekly
// window until it resets, a revoked key for hours. When a key fails and
// another can take the request, the request goes to the other key.
//
//	pool, err := keypool.New("gemini", keys, keypool.HeaderAuth("x-goog-api-key"))
//	if err != nil { ... }
//	defer pool.Close()
//	client := &http.Client{Transport: pool.Transport(nil)}
//
// Pool.Do offers the same order and benches to clients that are not HTTP.
// Secrets never leave memory: they are not logged, traced, stored, or put in
// an error; keys are known by their IDs.
//
// # How a request flows
//
// Each room (a file, or a family of files under one name) holds one idea
// whole. A request meets them in this order, and comes back only to the
// exchange, which drives it:
//
//  1. transport.go, the exchange: RoundTrip checks that the request goes
//     to the vendor (WithHosts), holds its body for another key, puts the
//     key on the request, sends it, hands the answer to the reader and the
//     judge, and fails over to the next key.
//  2. request.go: reading the request — its model (JSON escapes decoded),
//     the tokens it may use (the estimate), its bounds — with the one JSON
//     lexer of json.go.
//  3. keypool.go: choosing a key — order and tiers (Key.Priority),
//     conversations kept on their keys (affinity, a Responses chain on the
//     key whose answer made it), requests at once (Limits.InFlight), keys
//     an operator disabled, waiting lines, careful return, a pool taking
//     over from another (TakeOver) — and the Pool's report (Stats).
//  4. store*.go and window.go: the Store's atomic take of a key's windows
//     and budget (the memory store unless WithStore gives another), and
//     the window arithmetic it runs.
//  5. otel.go: the attempt's span and metrics, and OnAttempt.
//  6. reset*.go: reading the answer — headers (reset_headers.go), bodies
//     (reset_body.go), prose (reset_prose.go), times (reset_value.go), the
//     vendor catalogue (reset_vendors.go) — into a Kind and a Reset
//     (Classify, reset.go).
//  7. cooldown.go: acting on the answer — what it may bench (the rule
//     below), for how long, the quota ladder, early looks, what the store
//     learns, the events of OnEvict, OnBenchEnd and OnRateLimit.
//  8. usage.go: metering the answer's usage as its body is read — and the
//     ID of a response it makes, for affinity — and settling the
//     request's tokens and spend.
//  9. errors.go: what the caller gets when no key serves.
//
// Beside the flow: options.go (every Option), do.go (Pool.Do), retry.go
// (go-retryablehttp), fallback.go (routes over pools), store_badger*.go
// (the Badger store).
//
// # Words
//
// One word per idea, in the code, the docs and the command:
//
//   - answer: what the vendor sent back (an [*http.Response] in code).
//   - bench: a key out of rotation until a time, for one model or for
//     every model (a Fallback's route is benched too). OnEvict reports a
//     bench as an Eviction; its length is the cooldown.
//   - disabled: a key an operator took out of rotation (Pool.Disable)
//     until enabled, by no answer's evidence; never a bench, which ends.
//   - level: the step of the quota ladder, which a key climbs by quota
//     answers that date nothing and leaves on a success.
//   - window: the pool's count of a key's requests or tokens per minute
//     or per day (Limits). A vendor's [Window] is the span an answer names
//     (5h, daily, weekly, monthly).
//   - reading: what an answer says of a limit — when it lifts, which
//     Window, how full — as a [Reset]; OnRateLimit hears it as a Reading.
//   - account: keys naming one Account share its windows, and its rate
//     and quota benches.
//   - stated, learned, enforced: a limit an answer's headers state; a
//     stated limit the store keeps (learned); the limit a window enforces,
//     the tighter of the configured and the learned.
//   - quoted: an answer whose kind rests on words the request could have
//     written (the rule below).
//   - conversation: the requests a client names as one (WithAffinity),
//     kept on the key that served them while it can take them.
//   - reserve, spend: what a request may cost at most, held against a
//     Budget while it runs; what it cost, settled from its usage.
//
// # What an answer may bench
//
// A bench rests on evidence, and an answer benches only what it is evidence
// about, given who could have written it. The status, the rate-limit
// headers and the vendor's codes (a code, type, status or reason field of
// the body, its error object or its details, such as OpenAI's
// "insufficient_quota" or Google's "API_KEY_INVALID") are the vendor's own
// words. A message's prose may quote what the request sent ("Unrecognized
// request argument supplied: X").
//
//   - A 401 or a 402 benches the key for every model. A 429 benches the
//     key and its account for the model — for every model when it says the
//     money or a subscription's plan window (Anthropic's 5-hour and 7-day,
//     the ChatGPT backend's, a 5-hour or weekly window in prose) is spent
//     — its prose saying which window and for how long; one
//     that speaks of the vendor's overload is transient. A 5xx benches the
//     key for the model — once a request: a second bad moment of the same
//     request, from another key, is evidence of the request (a vendor
//     answers 500 to some inputs on every key) or of the vendor, so it
//     benches nothing, ends the failover and goes back to the caller, and
//     a Fallback benches no route for it.
//   - A 400 or 403 — or a 5xx that speaks of money — whose kind no code or
//     header states is quoted when the request could have written it: its
//     body, path or query hold the words the prose went by (or a JSON
//     escape that may hide them), or the status alone gave the kind (a bare
//     403), or the pool does not hold the body. So is a 402 that says the
//     request is too large for what the key has left. A quoted answer
//     benches nothing: the request goes to one more key, and only if that
//     key serves it is the first benched, for the model alone and for a
//     minute, after which it returns carefully; a second quoted answer ends
//     the request and goes back to the caller, and when no other key can
//     take the request the first does. Prose the request holds no word of
//     is the vendor's own, and benches as its codes do. (Pool.Do benches by
//     the kind its function's ProviderError gives: the caller judges.)
//   - Any other 4xx benches nothing.
//   - A Fallback benches a route only on the vendor's own words.
//
// Model names are read as the vendor reads them, JSON escapes decoded.
package keypool

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"
	"weak"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// Key is one API key of a pool.
//
// Printing a Key with any verb of the fmt package shows its ID, never its
// Secret — but fmt prints an unexported struct field by reflection, without
// calling Format, so a Key kept in an unexported field of a struct you print
// shows its Secret: keep keys out of values you print.
type Key struct {
	// Secret is the credential. It is never logged, traced, stored or put in
	// an error.
	Secret string
	// ID labels the key in stats, events, errors and stores. It defaults to
	// a short hash of Secret.
	ID string
	// Paid keys are used only when no free key of the same Priority can
	// take a request.
	Paid bool
	// Priority orders keys: a request goes to a key of a higher Priority
	// (a larger number) only when no key of a lower one can take it. Keys
	// of one Priority take requests in turn, free keys before paid ones.
	// The zero value is the first Priority; a negative one is refused.
	Priority int
	// Limits, when set, override the pool's limits for this key field by
	// field (WithLimits, WithModelLimits).
	Limits Limits
	// Budget caps what the key spends, by the prices of WithPrices: a key
	// whose day's or month's budget is spent takes no request until the
	// next day or month, and a model without a price is never sent to it.
	Budget Budget
	// Account, when set, names the account (a vendor's organisation or
	// project) the key belongs to: keys naming one account share its
	// windows, set by WithAccountLimits or learned from the vendor, and a
	// throttle or a spent quota of one benches them all for the model. A key
	// of an account has no Limits of its own; its own failures (a revoked
	// key) bench it alone.
	Account string
}

// Limits are a key's request and token limits per minute and per day, and
// the requests it may hold at once. A zero field is no limit on that axis.
type Limits struct {
	RPM, RPD, TPM, TPD int64
	// InFlight bounds the requests a key — or, in WithAccountLimits, an
	// account's keys together — hold at once in this process: a request
	// holds its key from the moment it takes it until its answer's body is
	// read to its end or closed (a stream's too), or until it fails over.
	// A request that finds every key full goes to another key, or waits
	// in line (WaitForKey). It counts in WithLimits, Key.Limits and
	// WithAccountLimits; windows (and stores) do not see it.
	InFlight int64
}

// none reports whether l sets no limit, as l == Limits{} does, field by
// field: the comparison of the whole struct is a call (runtime.memequal)
// on the request path.
func (l Limits) none() bool {
	return l.RPM == 0 && l.RPD == 0 && l.TPM == 0 && l.TPD == 0 && l.InFlight == 0
}

// over returns l with each nonzero field of o in place of l's.
func (l Limits) over(o Limits) Limits {
	if o.RPM != 0 {
		l.RPM = o.RPM
	}
	if o.RPD != 0 {
		l.RPD = o.RPD
	}
	if o.TPM != 0 {
		l.TPM = o.TPM
	}
	if o.TPD != 0 {
		l.TPD = o.TPD
	}
	return l
}

// tighter returns, axis by axis, the tighter of l and o (0 is no limit).
func (l Limits) tighter(o Limits) Limits {
	return Limits{RPM: windowspec.Tighter(l.RPM, o.RPM), RPD: windowspec.Tighter(l.RPD, o.RPD),
		TPM: windowspec.Tighter(l.TPM, o.TPM), TPD: windowspec.Tighter(l.TPD, o.TPD)}
}

// tokenCap returns the smallest token limit of l, or 0 if l has none.
func (l Limits) tokenCap() int64 { return windowspec.Tighter(l.TPM, l.TPD) }

func (l Limits) validate() error {
	if l.RPM < 0 || l.RPD < 0 || l.TPM < 0 || l.TPD < 0 || l.InFlight < 0 {
		return fmt.Errorf("negative limit in %+v", l)
	}
	return nil
}

func (l Limits) hasTokens() bool { return l.TPM != 0 || l.TPD != 0 }

// defaultID returns the ID a key without one gets: the first six bytes of
// the SHA-256 of its secret, in hex.
func defaultID(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:6])
}

func (k Key) id() string {
	if k.ID != "" {
		return k.ID
	}
	return defaultID(k.Secret)
}

// checkSecret returns an error saying what makes secret unusable on a
// request — white space around it, a control character in it — without
// quoting it.
func checkSecret(secret string) error {
	if strings.TrimSpace(secret) != secret {
		return errors.New("secret has white space around it (a line break read with it from a file?)")
	}
	for i, r := range secret {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("secret has a control character at byte %d", i)
		}
	}
	return nil
}

// checkName returns an error for a key's ID or account that holds a control
// character: stores keep an account's state under a name that starts with
// one.
func checkName(what, name string) error {
	for i, r := range name {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("the %s has a control character at byte %d", what, i)
		}
	}
	return nil
}

// Format prints the key's ID and tier, never its secret, for every verb:
// %v, %+v, %s and fmt.Sprint give "key ID (free)", %#v a Go-syntax value with
// the secret redacted.
func (k Key) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "keypool.Key{ID:%q, Paid:%t, Secret:\"[redacted]\"}", k.id(), k.Paid)
		return
	}
	tier := "free"
	if k.Paid {
		tier = "paid"
	}
	fmt.Fprint(f, "key "+k.id()+" ("+tier+")")
}

// Pool spreads requests over the keys of one vendor. It is safe for
// concurrent use by multiple goroutines.
type Pool struct {
	provider string
	cfg      config
	store    Store
	// mem is the memory store's state, when store is the package's own
	// memory or Badger store: the pool then takes and learns through the
	// entries each key keeps (memEntries) and the reservation a request
	// brings, looking nothing up.
	mem      *memoryStore
	keys     []*poolKey            // in the order given
	tiers    []tier                // the keys in the order requests try them
	accounts map[string][]*poolKey // the keys of each account
	// tokens reports that some token limit applies — configured, or
	// learned from the vendor — so requests are estimated and answers
	// settled.
	tokens atomic.Bool
	closed atomic.Bool
	tel    *telemetry
	// unbenched counts the keys unbenched, and the spends reset, by
	// hand, so that a Fallback's route over the pool knows to come back.
	unbenched atomic.Uint64
	// health reads the store's Health, when it has one; storeFailing
	// holds the kinds of store call (storeOp) failing now.
	health       func() error
	unnotify     func() // stops a HealthNotifier's notices; nil for none
	storeFailing atomic.Uint32
	lines        waitLines            // requests waiting for a key, by model
	landed       signal               // fires when a request gives back its place in a flight
	successor    atomic.Pointer[Pool] // the pool that took over from this one (TakeOver), or nil
	predecessor  weak.Pointer[Pool]   // the pool this one took over from, while it lives; set in New
	models       names                // the model names requests have named
	affinity     *affinity            // nil when conversations do not stay on keys
	alarm        *alarm               // rings OnBenchEnd; nil without it
	// disabling is the store's DisabledStore, nil when it has none;
	// disabledDue is when the pool reads it again (Unix nanoseconds).
	// disabledMu serializes the pool's changes of its keys' disabled
	// with what a read of the store applies, and disabledGen counts the
	// changes, so that a read begun before one does not undo it.
	disabling   DisabledStore
	disabledDue atomic.Int64
	disabledMu  sync.Mutex
	disabledGen uint64 // guarded by disabledMu
	// changingMu serializes Disable and Enable, store write and all.
	changingMu sync.Mutex
	// readsAside counts the reads of disabled keys that requests started
	// and did not wait for (refreshDisabledAside); Close waits for them,
	// once it has set asideStopped (guarded by disabledMu), after which
	// none starts.
	readsAside   sync.WaitGroup
	asideStopped bool
}

// poolKey is a key as the pool holds it. The fields every request reads
// or writes come first, together: a pool of many keys touches another
// key's state at each request, in as few cache lines as it can.
type poolKey struct {
	// claim is what every claim of the key holds before its request's
	// own fields (see Pool.scan): the key's, its account's and the pool's.
	claim   Claim
	entries memEntries // the key's and its account's entries in mem
	index   int
	tier    int // the index of its tier in Pool.tiers
	// auth is the value the key is put on a request with, built once: a
	// header value as a one-element slice, or "param=secret" for a query.
	auth []string
	// sent counts the requests sent with the key; answers counts their
	// answers by kind.
	sent    atomic.Int64
	answers [len(kindNames)]atomic.Int64
	returns returns // the models the key returns to carefully after a bench

	lastMu sync.Mutex // guards last and lastAt
	last   Reading    // what the vendor last said of the key's windows
	lastAt time.Time

	Key
	tel keyTelemetry
	// benchedUntil is the end of the latest bench this pool set on the key,
	// for any model, in Unix nanoseconds.
	benchedUntil atomic.Int64
	// flights are the requests the key and its account hold at once,
	// against their caps (Limits.InFlight); nil where there is none.
	flights [2]*flight
	// disabled says who took the key out of rotation (Pool.Disable); nil
	// while it is in.
	disabled atomic.Pointer[Disabled]
}

// New returns a pool over keys for provider, a name used in stats, errors,
// telemetry and stores (such as "openai" or "gemini"). It returns an error
// naming what is wrong for: no keys, a key without a secret, two keys with
// the same secret or ID, a negative limit, or a bad option. The keys are
// copied.
func New(provider string, keys []Key, opts ...Option) (*Pool, error) {
	cfg, err := newConfig(opts, forPool)
	if err != nil {
		return nil, fmt.Errorf("keypool: %s: %w", provider, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("keypool: %s: no keys", provider)
	}
	p := &Pool{provider: provider, cfg: cfg, store: cfg.store}
	if p.store == nil {
		p.store = NewMemoryStore()
	}
	p.mem = ownMemory(p.store)
	p.affinity = newAffinity(cfg.affinity.size, cfg.affinity.idle, p.store)
	p.alarm = newAlarm(cfg.clock, cfg.onBenchEnd)
	if h, ok := p.store.(HealthReporter); ok {
		p.health = h.Health
	}
	if err := p.addKeys(keys); err != nil {
		return nil, fmt.Errorf("keypool: %s: %w", provider, err)
	}
	if err := p.takeOver(cfg.prev); err != nil {
		return nil, fmt.Errorf("keypool: %s: TakeOver: %w", provider, err)
	}
	p.cfg.prev = nil // held, every reload would keep every pool before it
	p.tel = newTelemetry(p)
	for _, k := range p.keys {
		k.tel.span = keyAttributes(provider, k)
		k.claim = Claim{Provider: provider, KeyID: k.ID, Account: k.Account, Limits: p.limits(k, ""),
			Cap: cfg.keyCap, DayZone: cfg.days.loc, DayHour: cfg.days.hour, Budget: k.Budget, AccountBudget: cfg.accountBudgets[k.Account]}
	}
	tokens := cfg.limits.hasTokens() || cfg.keyCap.hasTokens()
	for _, l := range cfg.modelLimits {
		tokens = tokens || l.hasTokens()
	}
	for _, l := range cfg.accountLimits {
		tokens = tokens || l.hasTokens()
	}
	for _, k := range p.keys {
		tokens = tokens || k.Limits.hasTokens() || k.Budget != (Budget{})
	}
	tokens = tokens || len(cfg.accountBudgets) > 0
	p.tokens.Store(tokens)
	if d, ok := p.store.(DisabledStore); ok {
		p.disabling = d
		p.refreshDisabled(cfg.clock())
	}
	if n, ok := p.store.(HealthNotifier); ok && cfg.onStoreError != nil {
		// A change between calls is heard when it happens, not at the
		// next request.
		p.unnotify = n.NotifyHealth(func() { p.noteStore(opHealth, p.health()) })
	}
	return p, nil
}

func (p *Pool) addKeys(keys []Key) error {
	secrets := make(map[string]int, len(keys))
	ids := make(map[string]int, len(keys))
	for i, k := range keys {
		if k.Secret == "" {
			return fmt.Errorf("key %d has an empty secret", i)
		}
		if err := checkSecret(k.Secret); err != nil {
			return fmt.Errorf("key %s: %w", k.id(), err)
		}
		if j, dup := secrets[k.Secret]; dup {
			return fmt.Errorf("keys %d and %d have the same secret", j, i)
		}
		secrets[k.Secret] = i
		k.ID = k.id()
		if j, dup := ids[k.ID]; dup {
			return fmt.Errorf("keys %d and %d have the same ID %q", j, i, k.ID)
		}
		ids[k.ID] = i
		if err := k.Limits.validate(); err != nil {
			return fmt.Errorf("key %s: %w", k.ID, err)
		}
		if k.Priority < 0 {
			return fmt.Errorf("key %s: priority %d is negative", k.ID, k.Priority)
		}
		if err := checkName("ID", k.ID); err != nil {
			return fmt.Errorf("key %d: %w", i, err)
		}
		if err := checkName("account", k.Account); err != nil {
			return fmt.Errorf("key %s: %w", k.ID, err)
		}
		if err := k.Budget.validate(); err != nil {
			return fmt.Errorf("key %s: %w", k.ID, err)
		}
		if k.Account != "" && k.Limits != (Limits{InFlight: k.Limits.InFlight}) {
			return fmt.Errorf("key %s: an account's keys have no limits of their own: set the account's with WithAccountLimits", k.ID)
		}
		pk := &poolKey{Key: k, index: i, auth: p.cfg.auth.value(k.Secret)}
		pk.flights[0] = newFlight(cmp.Or(k.Limits.InFlight, p.cfg.limits.InFlight))
		p.keys = append(p.keys, pk)
		if k.Account != "" {
			if p.accounts == nil {
				p.accounts = map[string][]*poolKey{}
			}
			if mates := p.accounts[k.Account]; len(mates) > 0 {
				pk.flights[1] = mates[0].flights[1]
			} else {
				pk.flights[1] = newFlight(p.cfg.accountLimits[k.Account].InFlight)
			}
			p.accounts[k.Account] = append(p.accounts[k.Account], pk)
		}
		p.tiers = tier{priority: k.Priority, paid: k.Paid}.with(pk, p.tiers)
	}
	for i, t := range p.tiers {
		for _, k := range t.keys {
			k.tier = i
		}
	}
	return nil
}

// A tier is the keys of one Priority and one of free or paid, which take
// requests in turn from a round-robin cursor.
type tier struct {
	priority int
	paid     bool
	keys     []*poolKey
	next     *atomic.Uint64 // the cursor; a pointer, so that tiers may be sorted and grown
}

// with returns tiers with k added to tier t's keys, t made where it does
// not stand yet: tiers stay ordered by Priority, free before paid.
func (t tier) with(k *poolKey, tiers []tier) []tier {
	i, found := slices.BinarySearchFunc(tiers, t, func(a, b tier) int {
		if c := cmp.Compare(a.priority, b.priority); c != 0 {
			return c
		}
		switch {
		case a.paid == b.paid:
			return 0
		case a.paid:
			return 1
		}
		return -1
	})
	if !found {
		t.next = new(atomic.Uint64)
		tiers = slices.Insert(tiers, i, t)
	}
	tiers[i].keys = append(tiers[i].keys, k)
	return tiers
}

// limits returns the configured limits of key k's windows for model: the
// pool's, the model's over them, then the key's — or, for a key of an
// account, the account's — over those, field by field. InFlight is not a
// window's: it is zero.
func (p *Pool) limits(k *poolKey, model string) Limits {
	l := p.cfg.limits
	l.InFlight = 0
	if len(p.cfg.modelLimits) != 0 {
		if ml, ok := p.cfg.modelLimits[model]; ok {
			l = l.over(ml)
		}
	}
	if k.Account != "" {
		return l.over(p.cfg.accountLimits[k.Account])
	}
	return l.over(k.Limits)
}

// needTokens reports that some token limit applies, so requests are
// estimated and answers settled.
func (p *Pool) needTokens() bool { return p.tokens.Load() }

// single reports that the pool has one key, which is never benched: with
// nothing to rotate to, the vendor's answer goes to the caller untouched.
func (p *Pool) single() bool { return len(p.keys) == 1 }

// lease is one key taken for one attempt: the key, what the store was
// asked, and what it granted; probe when the attempt is the one request of
// the key's careful return.
type lease struct {
	key   *poolKey
	claim Claim
	grant Grant
	probe bool
	// flying: the lease holds its key's flights, until land.
	flying bool
	// price is the model's, nil when it has none: what the request used
	// is then spent. bound is the request's output bound (0: none), which
	// its answer counts at most.
	price *Price
	bound int64
}

// charge is what settling a lease needs, which a metered answer's body
// keeps until the caller has read it: the key, the model, the reservation,
// the model's price (nil when it has none), and the tokens and the cost
// the reservation recorded.
type charge struct {
	key          *poolKey
	model        string
	reservation  Reservation
	price        *Price
	bound        int64
	tokens, cost int64
}

func (l *lease) charge() charge {
	return charge{l.key, l.claim.Model, l.grant.Reservation, l.price, l.bound, l.claim.Tokens, l.claim.Cost}
}

// call is what one request remembers across its attempts: the keys that
// failed it, the soonest moment a key it saw comes back, and, once it has
// waited for a key (WaitForKey), when its waiting must end.
type call struct {
	tried    keySet
	soonest  time.Time
	waitEnds time.Time
	unpriced bool // a key with a budget was passed over: the model has no price
	// maxOutput is the output the request states it may be answered with
	// at most (its max_tokens and kin), 0 when it states none; dear, when
	// nonzero, is its reserve that was more than a whole budget of a key
	// passed over for it.
	maxOutput int64
	dear      int64
	// completions is how many completions of up to maxOutput each the
	// request asks for (RequestInfo.Completions).
	completions int
	disabled    int // the keys passed over as out of rotation
	// transient: an attempt of the request had a bad moment
	// (KindTransient); a second one benches nothing (badMoment).
	transient bool
	// cut: the request's body was longer than the pool read of it, so a
	// count of completions (or a bound) past what it read is unknown,
	// and its answer's output is not clamped to maxOutput's bound.
	cut bool
	// conversation is the request's, 0 for none (see WithAffinity); stay
	// the key it stays on, once looked.
	conversation conversation
	stay         *poolKey
	looked       bool
	// pinned: the conversation is one the vendor keeps for the
	// organisation of the key that made it (previous_response_id,
	// conversation); a key of another that takes the request does not
	// take the conversation.
	pinned bool
	// spare is where a take of the package's own store records the
	// request, allocated with the request; nil once a take used it, or
	// when the caller brings none.
	spare *memReservation
}

func (c *call) sooner(t time.Time) {
	if !t.IsZero() && (c.soonest.IsZero() || t.Before(c.soonest)) {
		c.soonest = t
	}
}

// acquire takes into l the first key in order that can take a request for
// model estimated at est: tier by tier (by Priority, free before paid),
// each tier's keys round-robin — but the key the request's conversation
// stays on first in its tier (see affinity) — each key only if c has not
// tried it. When none can, it returns a
// *NoAvailableKeyError — or, when only keys with a budget could have taken
// it and the model has no price, an error naming the model — and l holds
// nothing of use. The model must be one a store may keep
// (windowspec.CheckModel): the pool checks it before.
func (p *Pool) acquire(ctx context.Context, c *call, model string, est usageReport, l *lease) error {
	if err := p.usable(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := p.cfg.clock()
	p.refreshDisabledAside(now)
	c.disabled = 0
	if c.conversation != 0 && !c.looked { // a conversation is named only where affinity is on
		// Once a request: its attempts, and its turns in line, ask no more.
		c.stay, c.looked = p.affinity.keyOf(ctx, p, c.conversation, c.pinned, now), true
	}
	stay := c.stay // the key the request's conversation stays on
	first := -1    // the tier whose turn offers stay first
	if stay != nil {
		first = stay.tier
		if c.pinned {
			// Only stay's organisation can answer the request: it goes
			// before every tier, not only first in its own.
			first = 0
		}
	}
	for i := range p.tiers {
		t := &p.tiers[i]
		ok, err := false, error(nil)
		if i == first {
			ok, err = p.offer(ctx, c, stay, model, est, now, l)
		}
		if !ok && err == nil {
			ok, err = p.scan(ctx, c, t.keys, t.next, stay, model, est, now, l)
		}
		if ok && c.conversation != 0 && (!c.pinned || l.key == stay) {
			p.affinity.record(ctx, p, c.conversation, c.pinned, l.key, now, false)
		}
		if ok || err != nil {
			return err
		}
	}
	if c.unpriced && c.soonest.IsZero() {
		return fmt.Errorf("keypool: %s: model %q %w", p.provider, truncate(model, 64), errNoPrice)
	}
	if c.dear != 0 && c.soonest.IsZero() {
		return tooDearError(p.provider, model, c.dear)
	}
	err := noKeyError(p.provider, c.soonest, now)
	err.disabled = c.disabled
	return err
}

// scan offers the request to the keys of one tier, starting at the cursor,
// but for skip (nil: none), and reports whether one took it into l.
func (p *Pool) scan(ctx context.Context, c *call, keys []*poolKey, cursor *atomic.Uint64, skip *poolKey, model string, est usageReport, now time.Time, l *lease) (bool, error) {
	n := uint64(len(keys))
	if n == 0 {
		return false, nil
	}
	start := cursor.Add(1) - 1
	for i := range n {
		k := keys[(start+i)%n]
		if k == skip {
			continue
		}
		if ok, err := p.offer(ctx, c, k, model, est, now, l); ok || err != nil {
			if i > 0 && ok {
				// The next request starts past the key that took this
				// one, not at a key passed over: the keys that serve
				// share the turns of one that cannot.
				cursor.Add(i)
			}
			return ok, err
		}
	}
	return false, nil
}

// offer offers the request to key k, unless c has tried it, and reports
// whether k took it into l. The claim is built in l, which a request holds
// on its stack: a lease is never copied on the way.
func (p *Pool) offer(ctx context.Context, c *call, k *poolKey, model string, est usageReport, now time.Time, l *lease) (bool, error) {
	if c.tried.has(k.index) {
		return false, nil
	}
	if k.disabled.Load() != nil {
		c.disabled++
		return false, nil
	}
	ok, probe := k.returns.admit(model, now)
	if !ok {
		c.sooner(now.Add(probeRetry))
		return false, nil
	}
	cl := &l.claim
	*cl = k.claim
	cl.Model, cl.Now = model, now
	if len(p.cfg.modelLimits) != 0 {
		cl.Limits = p.limits(k, model)
		_, cl.Named = p.cfg.modelLimits[model]
	}
	cl.Tokens = est.total()
	if limit := windowspec.Tighter(cl.Limits.tokenCap(), cl.Cap.tokenCap()); limit > 0 {
		cl.Tokens = min(cl.Tokens, limit)
	}
	price := p.cfg.prices[model]
	if price == nil && (cl.Budget != (Budget{}) || cl.AccountBudget != (Budget{})) {
		// A budget cannot hold what has no price: never silently free.
		c.unpriced = true
		if probe {
			k.returns.done(model, false)
		}
		return false, nil
	}
	if price != nil {
		cl.Cost, cl.Unbounded = price.reserve(est, c.maxOutput, c.completions)
		if cl.Budget.exceeds(cl.Cost) || cl.AccountBudget.exceeds(cl.Cost) {
			// No day or month will ever have room for it.
			c.dear = cl.Cost
			if probe {
				k.returns.done(model, false)
			}
			return false, nil
		}
	}
	if !k.fly() {
		// Full of requests under way: one ends soon, and a request
		// waiting in line hears of it (Pool.landed).
		c.sooner(now.Add(flightRetry))
		if probe {
			k.returns.done(model, false)
		}
		return false, nil
	}
	err := p.takeFrom(ctx, c, k, cl, &l.grant)
	p.storeResult(opTake, err)
	if err == nil && l.grant.OK {
		l.key, l.probe, l.price, l.bound = k, probe, price, price.outputBound(c.maxOutput, c.completions)
		if c.cut {
			l.bound = 0 // the vendor may have been asked for more completions than the pool read
		}
		l.flying = k.flights[0] != nil || k.flights[1] != nil
		return true, nil
	}
	p.land(k)
	if probe {
		k.returns.done(model, false)
	}
	if err != nil {
		return false, fmt.Errorf("keypool: %s: store: %w", p.provider, err)
	}
	c.sooner(l.grant.RetryAt)
	return false, nil
}

// flightRetry is when a request that found every key it could take full
// of requests under way tries again, if nothing wakes it sooner.
const flightRetry = time.Second

// A flight counts the requests a key or an account holds at once, against
// its cap.
type flight struct {
	n   *atomic.Int64 // shared with the pool taken over from (TakeOver)
	cap int64
}

// newFlight returns the flight of a cap, nil for none (0).
func newFlight(limit int64) *flight {
	if limit <= 0 {
		return nil
	}
	return &flight{n: new(atomic.Int64), cap: limit}
}

// takeOver makes p count what prev holds (see TakeOver); nil prev is none.
func (p *Pool) takeOver(prev *Pool) error {
	switch {
	case prev == nil:
		return nil
	case prev.provider != p.provider:
		return fmt.Errorf("a pool of %q cannot take over from one of %q", p.provider, prev.provider)
	case prev.closed.Load():
		return errors.New("the pool taken over from is closed")
	}
	old := map[string]*poolKey{}
	accounts := map[string]*flight{}
	for _, k := range prev.keys {
		old[k.Secret] = k // the vendor caps a secret, whatever its ID
		if f := k.flights[1]; f != nil {
			accounts[k.Account] = f
		}
	}
	for _, k := range p.keys {
		if o := old[k.Secret]; o != nil && k.flights[0] != nil && o.flights[0] != nil {
			k.flights[0].n = o.flights[0].n
		}
	}
	for _, mates := range p.accounts {
		if f, o := mates[0].flights[1], accounts[mates[0].Account]; f != nil && o != nil {
			f.n = o.n // one flight for the account's keys, which share it
		}
	}
	prev.successor.Store(p)
	p.predecessor = weak.Make(prev)
	if p.affinity != nil && prev.affinity != nil {
		p.affinity.keep(prev, p)
	}
	return nil
}

// fly takes a place for one request in the key's flights, and reports
// whether there was one in each.
func (k *poolKey) fly() bool {
	for i, f := range k.flights {
		if f != nil && f.n.Add(1) > f.cap {
			f.n.Add(-1)
			for _, g := range k.flights[:i] {
				if g != nil {
					g.n.Add(-1)
				}
			}
			return false
		}
	}
	return true
}

// land gives back the place a request held in key k's flights, and wakes
// the requests waiting in line for a key.
func (p *Pool) land(k *poolKey) {
	if k.flights[0] == nil && k.flights[1] == nil {
		return
	}
	for _, f := range k.flights {
		if f != nil {
			f.n.Add(-1)
		}
	}
	if p.lines.waiting.Load() > 0 {
		p.landed.fire()
	}
	for s := p.successor.Load(); s != nil; s = s.successor.Load() {
		if s.lines.waiting.Load() > 0 {
			s.landed.fire() // its caps count this place too
		}
	}
	for q := p.predecessor.Value(); q != nil; q = q.predecessor.Value() {
		if q.lines.waiting.Load() > 0 {
			q.landed.fire() // so do the caps of the pools it took over from
		}
	}
}

// named keeps conversation c, which key k's answer made, on k, and on the
// key like k (keyLike) in each pool that took over from p since the
// request was sent: the next turn goes to the newest.
func (p *Pool) named(ctx context.Context, c conversation, k *poolKey) {
	now := p.cfg.clock()
	p.affinity.named(ctx, p, c, k, now)
	for s := p.successor.Load(); s != nil; s = s.successor.Load() {
		if sk := s.keyLike(k); s.affinity != nil && sk != nil {
			s.affinity.record(ctx, s, c, true, sk, now, false) // a shared store was told above
		}
	}
}

// landLease gives back what lease l holds of its key's flights, once.
func (p *Pool) landLease(l *lease) {
	if l.flying {
		l.flying = false
		p.land(l.key)
	}
}

// A signal wakes whoever waits on it when it fires; after that, a new wait
// waits for the next fire. It is safe for concurrent use.
type signal struct {
	mu sync.Mutex // guards ch
	ch chan struct{}
}

// wait returns a channel closed at the next fire.
func (s *signal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

// fire wakes every wait so far.
func (s *signal) fire() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// A conversation is what affinity knows of a request's conversation: a
// hash of what names it, 0 for none.
type conversation uint64

// conversationOf returns the conversation named by b, 0 when b is empty.
// The hash (FNV-1a) is the same in every process, so that replicas sharing
// a store agree; two conversations that share a hash share a key, which
// costs only a cache.
func conversationOf[T string | []byte](b T) conversation {
	if len(b) == 0 {
		return 0
	}
	h := uint64(14695981039346656037)
	for i := range len(b) {
		h ^= uint64(b[i])
		h *= 1099511628211
	}
	return conversation(max(h, 1))
}

// String returns the conversation as a store keeps it.
func (c conversation) String() string { return strconv.FormatUint(uint64(c), 16) }

// storeName returns the name a shared store keeps conversation c by: an
// ID the vendor made (made) apart from a name a request gave, so that a
// request naming another's response ID as its session moves no chain.
func (c conversation) storeName(made bool) string {
	if made {
		return "r" + c.String()
	}
	return c.String()
}

// The defaults of WithAffinityMemory: how many conversations a Pool keeps
// on their keys, and for how long after a conversation's last request.
const (
	DefaultAffinityConversations = 10000
	DefaultAffinityIdle          = time.Hour
)

// affinityRecheck is how long a pool whose store shares conversations
// (AffinityStore) trusts what it remembers of one before asking the store
// again: another replica may have moved it.
const affinityRecheck = 30 * time.Second

// affinity keeps a conversation on the key that served it last, while that
// key can take its requests, so that the vendor's prompt cache — kept per
// key, or per organisation — holds the conversation's prefix. It remembers
// the conversations of the last idle, at most a bounded number of each
// kind (least recently used first out), and asks the store, when the store
// shares them among replicas. It is safe for concurrent use.
type affinity struct {
	// seen holds the conversations requests name — a prompt_cache_key, a
	// user, X-Session-Id, WithAffinity's — and made the IDs of responses
	// and conversations the vendor made (named), which only their key's
	// organisation can answer: apart, so that requests naming ever new
	// conversations — a client that names each anew, or one flooding the
	// pool — push out no chain the vendor keeps.
	seen, made *lru.Cache[conversation, affine]
	idle       time.Duration
	shared     AffinityStore // nil: this process's alone
}

// of returns the conversations of the kind made says.
func (a *affinity) of(made bool) *lru.Cache[conversation, affine] {
	if made {
		return a.made
	}
	return a.seen
}

// affine is a conversation's key: its index, when it last served the
// conversation, and when the shared store last said or heard so.
type affine struct {
	key    int32
	at     time.Time
	synced time.Time
}

// newAffinity returns the affinity of a pool remembering size
// conversations for idle each, nil for none (size 0).
func newAffinity(size int, idle time.Duration, s Store) *affinity {
	if size <= 0 {
		return nil
	}
	seen, err := lru.New[conversation, affine](size)
	if err != nil {
		return nil // only for a size <= 0
	}
	made, err := lru.New[conversation, affine](size)
	if err != nil {
		return nil
	}
	a := &affinity{seen: seen, made: made, idle: idle}
	a.shared, _ = s.(AffinityStore)
	return a
}

// keyOf returns the key conversation c — an ID the vendor made when made
// — stays on at now, nil when it stays on none: no key served it in the
// last idle.
func (a *affinity) keyOf(ctx context.Context, p *Pool, c conversation, made bool, now time.Time) *poolKey {
	seen := a.of(made)
	e, ok := seen.Get(c)
	ok = ok && now.Sub(e.at) < a.idle
	if a.shared == nil || (ok && now.Sub(e.synced) < affinityRecheck) {
		if !ok {
			return nil
		}
		return p.keys[e.key]
	}
	id, err := a.shared.Affinity(ctx, p.provider, c.storeName(made), a.idle)
	p.storeResult(opAffinity, err)
	if k := p.keyByID(id); err == nil && k != nil {
		seen.Add(c, affine{key: int32(k.index), at: now, synced: now})
		return k
	}
	if !ok {
		return nil
	}
	return p.keys[e.key] // what this process remembers, the store silent
}

// named records that key k's answer at now made what conversation c names
// — an OpenAI response or conversation, which the vendor keeps for the
// organisation of the key that made it, and which a later request names
// (previous_response_id, conversation) — and tells the shared store at
// once: that request may come to another replica, and on another key it
// fails (previous_response_not_found).
func (a *affinity) named(ctx context.Context, p *Pool, c conversation, k *poolKey, now time.Time) {
	a.record(ctx, p, c, true, k, now, true)
}

// record records that key k holds conversation c — an ID the vendor made
// when made — at now, telling the shared store when tell, or when c has
// come back (its second request here) and was not said lately: a
// conversation of one request — a client that names each request anew —
// costs the store no write.
func (a *affinity) record(ctx context.Context, p *Pool, c conversation, made bool, k *poolKey, now time.Time, tell bool) {
	seen := a.of(made)
	e, known := seen.Peek(c)
	if !known || int(e.key) != k.index {
		e = affine{key: int32(k.index)}
	}
	e.at = now
	if a.shared != nil && (tell || known && now.Sub(e.synced) >= affinityRecheck) {
		err := a.shared.SetAffinity(ctx, p.provider, c.storeName(made), k.ID, a.idle)
		p.storeResult(opAffinity, err)
		if err == nil {
			e.synced = now
		}
	}
	seen.Add(c, e)
}

// namesConversations reports whether the answer to r may make what a later
// request names as its conversation: a POST to OpenAI's Responses or
// Conversations endpoint, under any base path (Azure's /openai/v1/…).
func namesConversations(r *http.Request) bool {
	if r == nil || r.Method != http.MethodPost || r.URL == nil {
		return false
	}
	return strings.HasSuffix(r.URL.Path, "/responses") || strings.HasSuffix(r.URL.Path, "/conversations")
}

// keep adds the conversations prev's affinity remembers to a's, each on
// the key of p, the pool taking over, with the secret of the key it stayed
// on in prev — the vendor's cache and what it keeps are the secret's
// organisation's — else with its ID (a key renewed in place), least
// recently served first, so that the LRU order holds.
func (a *affinity) keep(prev, p *Pool) {
	bySecret := make(map[string]int32, len(p.keys))
	byID := make(map[string]int32, len(p.keys))
	for _, k := range p.keys {
		bySecret[k.Secret], byID[k.ID] = int32(k.index), int32(k.index)
	}
	for _, made := range []bool{false, true} {
		from, to := prev.affinity.of(made), a.of(made)
		for _, c := range from.Keys() {
			e, ok := from.Peek(c)
			if !ok || int(e.key) >= len(prev.keys) {
				continue
			}
			was := prev.keys[e.key]
			i, ok := bySecret[was.Secret]
			if !ok {
				i, ok = byID[was.ID]
			}
			if ok {
				e.key = i
				to.Add(c, e)
			}
		}
	}
}

// conversations counts the conversations that stay on each key at now,
// by key index.
func (a *affinity) conversations(keys int, now time.Time) []int {
	n := make([]int, keys)
	if a == nil {
		return n
	}
	for _, made := range []bool{false, true} {
		for _, e := range a.of(made).Values() {
			if now.Sub(e.at) < a.idle && int(e.key) < keys {
				n[e.key]++
			}
		}
	}
	return n
}

// keyLike returns p's key of k's secret, else of k's ID, nil when p has
// neither: the key that a pool taking over from k's holds for it.
func (p *Pool) keyLike(k *poolKey) *poolKey {
	for _, o := range p.keys {
		if o.Secret == k.Secret {
			return o
		}
	}
	return p.keyByID(k.ID)
}

// keyByID returns the key with the given ID, nil when none has it.
func (p *Pool) keyByID(id string) *poolKey {
	if id == "" {
		return nil
	}
	for _, k := range p.keys {
		if k.ID == id {
			return k
		}
	}
	return nil
}

// takeFrom asks the store to take cl for key k, into g. The package's own
// stores take from the entries k keeps, into the reservation c brings, if
// it still has it.
func (p *Pool) takeFrom(ctx context.Context, c *call, k *poolKey, cl *Claim, g *Grant) error {
	var err error
	if p.mem == nil {
		*g, err = p.store.Take(ctx, *cl)
		return err
	}
	*g, err = p.mem.takeAt(&k.entries, c.spare, cl)
	if g.OK {
		c.spare = nil
	}
	return err
}

// keySet is a set of key indexes: a bit mask for the first 64 keys, and a
// slice, made only when needed, for the rest.
type keySet struct {
	small uint64
	big   []uint64
}

func (s *keySet) add(i int) {
	if i < 64 {
		s.small |= 1 << i
		return
	}
	w := i/64 - 1
	if w >= len(s.big) {
		s.big = append(s.big, make([]uint64, w+1-len(s.big))...)
	}
	s.big[w] |= 1 << (i % 64)
}

func (s *keySet) has(i int) bool {
	if i < 64 {
		return s.small&(1<<i) != 0
	}
	w := i/64 - 1
	return w < len(s.big) && s.big[w]&(1<<(i%64)) != 0
}

// usable returns an error when the pool cannot take requests: it was closed,
// or it is a zero Pool rather than one made by New.
func (p *Pool) usable() error {
	switch {
	case p == nil || p.store == nil:
		return errNotNew
	case p.closed.Load():
		return fmt.Errorf("keypool: %s: pool is closed", p.provider)
	}
	return nil
}

// errNotNew is the error of a Pool that New did not make.
var errNotNew = errors.New("keypool: a Pool must be made by New")

// Close flushes the pool's state to its store and stops the pool: requests
// waiting for a key fail at once, and later requests fail. It does not close
// a store given with WithStore. The flush is bounded by 15 seconds, so a
// store that does not answer cannot hold Close; what it did not write is
// named in the error. A zero Pool's Close does nothing.
func (p *Pool) Close() error {
	if p == nil || p.store == nil || p.closed.Swap(true) {
		return nil
	}
	p.lines.close()
	p.tel.close()
	p.alarm.stop()
	p.disabledMu.Lock()
	p.asideStopped = true // a read starting aside has counted itself, or starts none
	p.disabledMu.Unlock()
	p.readsAside.Wait() // bounded by statsTimeout
	if p.unnotify != nil {
		p.unnotify()
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := p.store.Flush(ctx); err != nil {
		return fmt.Errorf("keypool: %s: flushing store: %w", p.provider, err)
	}
	return nil
}

// closeTimeout bounds the flush of Close.
const closeTimeout = 15 * time.Second

// waitLines holds the requests waiting for a key (WaitForKey), one line per
// model, first come first served. Only the head of a line tries for a key;
// the others wait for their turn, and a new request for a model with a line
// joins it rather than pass it.
type waitLines struct {
	waiting atomic.Int64 // requests in all lines; 0 lets requests skip the lock
	mu      sync.Mutex   // guards byModel and closed
	byModel map[string][]chan struct{}
	// closed is closed by close: every waiter leaves at once.
	closed chan struct{}
}

// join puts a request in its model's line and returns its turn signal,
// closed when it reaches the head (at once if the line was empty), and the
// signal of the pool's close.
func (w *waitLines) join(model string) (turn, closed chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byModel == nil {
		w.byModel = map[string][]chan struct{}{}
	}
	if w.closed == nil {
		w.closed = make(chan struct{})
	}
	turn = make(chan struct{})
	line := append(w.byModel[model], turn)
	w.byModel[model] = line
	if len(line) == 1 {
		close(turn)
	}
	w.waiting.Add(1)
	return turn, w.closed
}

// leave takes a request out of its model's line and, if it was the head,
// gives the next one its turn.
func (w *waitLines) leave(model string, turn chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := w.byModel[model]
	for i, c := range line {
		if c != turn {
			continue
		}
		line = append(line[:i], line[i+1:]...)
		if i == 0 && len(line) > 0 {
			close(line[0])
		}
		break
	}
	if len(line) == 0 {
		delete(w.byModel, model)
	} else {
		w.byModel[model] = line
	}
	w.waiting.Add(-1)
}

// close releases every waiter, now and later.
func (w *waitLines) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed == nil {
		w.closed = make(chan struct{})
	}
	select {
	case <-w.closed:
	default:
		close(w.closed)
	}
}

// queued reports whether requests for model are waiting.
func (w *waitLines) queued(model string) bool {
	if w.waiting.Load() == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byModel[model]) > 0
}

// minPause is the shortest a waiting request sleeps between two tries for a
// key: no wait ever turns into a loop that does not sleep.
const minPause = 10 * time.Millisecond

// take acquires a key into l as acquire does and, when the pool waits for
// keys (WaitForKey), waits in line for one when none is free.
func (p *Pool) take(ctx context.Context, c *call, model string, est usageReport, l *lease) error {
	if p.cfg.wait <= 0 {
		return p.acquire(ctx, c, model, est, l)
	}
	var err error
	if !p.lines.queued(model) {
		if err = p.acquire(ctx, c, model, est, l); !isNoKey(err) {
			return err
		}
	}
	return p.wait(ctx, c, model, est, err, l)
}

// wait waits in line for a key. At its turn it sleeps until the soonest key
// returns, then tries again — every key, those that failed this request
// included, since a key that comes back from a bench may serve it now. It
// gives up, with the last *NoAvailableKeyError, when that moment lies beyond
// the pool's wait or the context's deadline; it leaves at once when the
// context ends or the pool is closed. Every try after the first sleeps at
// least minPause.
func (p *Pool) wait(ctx context.Context, c *call, model string, est usageReport, last error, l *lease) error {
	start := time.Now()
	if c.waitEnds.IsZero() {
		// The bound is the request's, whatever it tried since it began to
		// wait.
		c.waitEnds = start.Add(p.cfg.wait)
	}
	deadline := c.waitEnds
	turn, closed := p.lines.join(model)
	defer p.lines.leave(model, turn)
	if last == nil {
		last = noKeyError(p.provider, time.Time{}, p.cfg.clock())
	}
	if err := sleepUntil(ctx, closed, turn, deadline, p.provider); err != nil {
		if errors.Is(err, errWaitOver) {
			return last
		}
		return err
	}
	for {
		c.forget()
		landed := p.landed.wait() // before the try: a place given back after it wakes the sleep
		err := p.acquire(ctx, c, model, est, l)
		var na *NoAvailableKeyError
		if !errors.As(err, &na) {
			if err == nil {
				p.tel.wait(ctx, time.Since(start))
			}
			return err
		}
		if na.RetryAt.IsZero() {
			return err
		}
		wake := time.Now().Add(max(na.RetryAt.Sub(p.cfg.clock()), minPause))
		if wake.After(deadline) {
			return err
		}
		if d, ok := ctx.Deadline(); ok && wake.After(d) {
			return err
		}
		if err := sleepUntil(ctx, closed, landed, wake, p.provider); err != nil && !errors.Is(err, errWaitOver) {
			return err
		}
	}
}

// errWaitOver reports that a sleep reached its end.
var errWaitOver = errors.New("wait over")

// sleepUntil sleeps until the moment end (errWaitOver), or until turn is
// closed (nil; a nil turn never is), the context ends (its error) or the pool
// is closed.
func sleepUntil(ctx context.Context, closed chan struct{}, turn <-chan struct{}, end time.Time, provider string) error {
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case <-turn:
		return nil
	case <-t.C:
		return errWaitOver
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return fmt.Errorf("keypool: %s: pool is closed", provider)
	}
}

// forget makes a request that waited try every key again: the keys that
// failed it may be back, and the moments it saw have passed. The end of its
// wait stays.
func (c *call) forget() {
	c.tried = keySet{}
	c.soonest = time.Time{}
}

func isNoKey(err error) bool {
	var na *NoAvailableKeyError
	return errors.As(err, &na)
}

// KeyStats is what is known of one key: what its store holds (its benches,
// levels and usage) and, from Pool.Stats, what its pool saw (requests sent,
// answers by kind, the vendor's last reading).
type KeyStats struct {
	ID   string
	Paid bool
	// Account is the key's account, whose windows and benches it shares;
	// Pool.Stats gives each key of an account the account's models, cap
	// and benches, with its own bench of every model (a revoked key).
	Account string
	// Bench is the bench that holds the key for every model; zero when
	// none does.
	Bench Bench
	// Cap is what the key has used across its models; CapLimits the
	// limits on that use (WithKeyCap), zero when there are none. A Store
	// fills only Cap.
	Cap       Usage
	CapLimits Limits
	// Spent is what the key spent today and this month, in US dollars;
	// Budget its caps. For a key of an account, AccountSpent and
	// AccountBudget are the account's.
	Spent, Budget               Budget
	AccountSpent, AccountBudget Budget
	// Models holds the key's state per model, sorted by model name in
	// Pool.Stats and in no particular order from a Store.
	Models []ModelStats
	// Sent counts the requests sent with the key; Answers counts their
	// answers by kind (KindNone for successes and other answers that bench
	// nothing).
	Sent    int64
	Answers map[Kind]int64
	// Last is what the vendor last said of the key's windows (how full,
	// when it resets), at LastAt; zero when it has said nothing.
	Last   Reading
	LastAt time.Time
	// Conversations counts the conversations that stay on the key (see
	// WithAffinity), as this process knows them.
	Conversations int
	// Disabled says who took the key out of rotation, and when; nil while
	// it is in (see Pool.Disable).
	Disabled *Disabled
}

// ModelStats is what is known of one key for one model.
type ModelStats struct {
	Model string
	// Limits are the limits enforced on the key for the model: axis by
	// axis, the tighter of Configured and Learned. Configured are those the
	// pool was given (WithLimits, WithModelLimits, WithAccountLimits,
	// Key.Limits); Learned those the vendor last stated. A Store fills only
	// Learned.
	Limits     Limits
	Configured Limits
	Learned    Limits
	Bench      Bench
	// Level is the number of quota answers without a date since the key's
	// last success for the model.
	Level int
	Usage Usage
}

// statsTimeout bounds the store calls of Stats, which takes no context.
const statsTimeout = 5 * time.Second

// Stats returns what the pool knows of each key, in the order the keys were
// given. It asks the store, each call bounded by a few seconds, and leaves
// out what a failing store cannot say. A zero Pool has no stats.
func (p *Pool) Stats() []KeyStats {
	if p.usable() == errNotNew {
		return nil
	}
	now := p.cfg.clock()
	p.refreshDisabled(now)
	out := make([]KeyStats, 0, len(p.keys))
	conversations := p.affinity.conversations(len(p.keys), now)
	for _, k := range p.keys {
		ks := p.stored(k, now)
		ks.ID, ks.Paid, ks.Account, ks.Sent, ks.Answers = k.ID, k.Paid, k.Account, k.sent.Load(), map[Kind]int64{}
		ks.Conversations = conversations[k.index]
		ks.CapLimits = p.cfg.keyCap
		ks.Disabled = k.disabled.Load()
		k.lastMu.Lock()
		ks.Last, ks.LastAt = k.last, k.lastAt
		k.lastMu.Unlock()
		for kind := range k.answers {
			if n := k.answers[kind].Load(); n != 0 {
				ks.Answers[Kind(kind)] = n
			}
		}
		out = append(out, ks)
	}
	return out
}

// stored returns what the store holds for key k at now — for a key of an
// account, the account's windows and benches, and the later of its own
// bench and the account's — with each model's configured, learned and
// enforced limits. A store that fails leaves it empty.
func (p *Pool) stored(k *poolKey, now time.Time) KeyStats {
	state := func(id string) (KeyStats, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		defer cancel()
		st, err := p.store.State(ctx, p.provider, id, now)
		return st, err == nil
	}
	ks, ok := state(k.ID)
	if !ok {
		return KeyStats{}
	}
	ks.Budget = k.Budget
	if k.Account != "" {
		own := ks
		if ks, ok = state(accountID(k.Account)); !ok {
			return KeyStats{}
		}
		if own.Bench.Until.After(ks.Bench.Until) {
			ks.Bench = own.Bench
		}
		ks.AccountSpent, ks.AccountBudget = ks.Spent, p.cfg.accountBudgets[k.Account]
		ks.Spent, ks.Budget = own.Spent, own.Budget
	}
	for i := range ks.Models {
		m := &ks.Models[i]
		m.Configured = p.limits(k, m.Model)
		m.Limits = m.Configured.tighter(m.Learned)
	}
	slices.SortFunc(ks.Models, func(a, b ModelStats) int { return cmp.Compare(a.Model, b.Model) })
	return ks
}

// available returns how many keys no bench of this pool holds at now, for
// any model.
func (p *Pool) available(now time.Time) int {
	n := 0
	for _, k := range p.keys {
		if k.benchedUntil.Load() <= now.UnixNano() && k.disabled.Load() == nil {
			n++
		}
	}
	return n
}

// Unbench lifts every bench of the key with the given ID and sets its levels
// back to zero: an operator's manual return, for a key that was fixed (a
// topped-up balance, a renewed key). It also forgets what the key's
// windows count and the limits the vendor stated (see Store.Unbench) —
// for a key of an account, the account's, which its other keys share — so
// that whatever one answer set, a learned day window included, is lifted.
// A Fallback's route over the pool that is benched comes back with it. It
// returns an error for an unknown ID or a failing store.
func (p *Pool) Unbench(ctx context.Context, keyID string) error {
	k, err := p.operatorKey(keyID)
	if err != nil {
		return err
	}
	for _, id := range k.stateIDs() {
		if err := p.store.Unbench(ctx, p.provider, id); err != nil {
			return fmt.Errorf("keypool: %s: unbench %s: %w", p.provider, keyID, err)
		}
	}
	k.benchedUntil.Store(0)
	var mates []string
	for _, o := range p.accounts[k.Account] {
		mates = append(mates, o.ID)
	}
	p.alarm.drop(p.provider, k.ID, mates)
	p.unbenched.Add(1)
	return nil
}

// ResetSpend forgets what the key with the given ID spent today and this
// month, and what its requests in flight reserve — for a key of an
// account, the account's spend too, which its other keys share — so that
// its budget has all its room again: an operator's answer to a vendor's
// report that was wrong, or to reservations a process that ended left
// counted. A request in flight counts what its answer costs once it
// settles. A Fallback's route over the pool that is benched comes back
// with it. It returns an error for an unknown ID, a store that cannot
// reset spend (see SpendResetter) or a failing store.
func (p *Pool) ResetSpend(ctx context.Context, keyID string) error {
	k, err := p.operatorKey(keyID)
	if err != nil {
		return err
	}
	r, ok := p.store.(SpendResetter)
	if !ok {
		return fmt.Errorf("keypool: %s: reset spend of %s: the store (%T) cannot reset spend", p.provider, keyID, p.store)
	}
	for _, id := range k.stateIDs() {
		if err := r.ResetSpend(ctx, p.provider, id); err != nil {
			return fmt.Errorf("keypool: %s: reset spend of %s: %w", p.provider, keyID, err)
		}
	}
	p.unbenched.Add(1) // a Fallback's route the spent budget benched comes back
	return nil
}

// Disable takes the key with the given ID out of rotation until Enable
// puts it back: no request is sent with it from then on, though those
// under way finish. by names who did it — at most 128 bytes of UTF-8
// without control or format characters, such as an operator's name — and Stats
// shows it with the time. A store that keeps it (DisabledStore) keeps it
// across restarts, and a store replicas share for every replica, which
// hears of it within DisabledRefresh. It returns an error for an unknown
// ID, a by it cannot show, or a failing store, and then changes nothing.
func (p *Pool) Disable(ctx context.Context, keyID, by string) error {
	k, err := p.operatorKey(keyID)
	if err != nil {
		return err
	}
	if err := checkBy(by); err != nil {
		return fmt.Errorf("keypool: %s: disable %s: %w", p.provider, keyID, err)
	}
	return p.setDisabled(ctx, k, &Disabled{By: by, At: p.cfg.clock().UTC()})
}

// Enable puts the key with the given ID back into rotation after Disable;
// a key in rotation stays in. It returns an error for an unknown ID or a
// failing store, and then changes nothing.
func (p *Pool) Enable(ctx context.Context, keyID string) error {
	k, err := p.operatorKey(keyID)
	if err != nil {
		return err
	}
	return p.setDisabled(ctx, k, nil)
}

// DisabledRefresh is how often a pool whose store keeps disabled keys
// (DisabledStore) reads them again, for what another replica disabled or
// enabled: its first request that much after the last read starts the
// read, and goes on without waiting for it; Stats reads before it answers,
// unless a read is under way.
const DisabledRefresh = 5 * time.Second

// disabledRetry is how soon a pool reads its disabled keys again after the
// store failed to answer: sooner than DisabledRefresh, so that a key an
// operator disabled is out again within it of the store's return, and not
// at every request, which would each wait for a store that is down.
const disabledRetry = time.Second

// setDisabled records d for key k in the store, when it keeps it, and then
// in the pool; a key back in rotation wakes the requests waiting for one.
func (p *Pool) setDisabled(ctx context.Context, k *poolKey, d *Disabled) error {
	verb := "disable"
	if d == nil {
		verb = "enable"
	}
	// changingMu, not disabledMu, is held across the store's write: a
	// read of the store, a request starting one and Close never wait on
	// a slow store's write.
	p.changingMu.Lock()
	defer p.changingMu.Unlock()
	if p.disabling != nil {
		if err := p.disabling.SetDisabled(ctx, p.provider, k.ID, d); err != nil {
			return fmt.Errorf("keypool: %s: %s %s: %w", p.provider, verb, k.ID, err)
		}
	}
	p.disabledMu.Lock()
	defer p.disabledMu.Unlock()
	p.disabledGen++
	if k.disabled.Swap(d) != nil && d == nil {
		p.backInRotation()
	}
	return nil
}

// backInRotation tells a Fallback's route over the pool, and the requests
// waiting for a key, that a key is back.
func (p *Pool) backInRotation() {
	p.unbenched.Add(1)
	p.landed.fire()
}

// refreshDisabled reads the store's disabled keys again when
// DisabledRefresh has passed since the last read — for Stats, which shows
// them, before it answers.
func (p *Pool) refreshDisabled(now time.Time) {
	if next, ok := p.claimDisabledRead(now); ok {
		p.readDisabled(next)
	}
}

// refreshDisabledAside starts a read of the store's disabled keys when
// DisabledRefresh has passed since the last read, and does not wait for
// it: the request that finds the read due — or a Fallback's look at a
// route benched — goes on with what the pool knows, and the store's
// answer applies to the requests after it. A store that hangs costs no
// request its timeout. Close waits for a read under way.
func (p *Pool) refreshDisabledAside(now time.Time) {
	if next, ok := p.claimDisabledRead(now); ok {
		p.disabledMu.Lock()
		if p.asideStopped { // a closed pool asks no more of the store
			p.disabledMu.Unlock()
			return
		}
		p.readsAside.Add(1) // under disabledMu: before Close waits, or not at all
		p.disabledMu.Unlock()
		go func() {
			defer p.readsAside.Done()
			p.readDisabled(next)
		}()
	}
}

// claimDisabledRead moves disabledDue on to DisabledRefresh after now and
// reports true, unless the pool's store keeps no disabled keys, the read
// is not due or another call moved it first: the others go on with what
// the pool knows.
func (p *Pool) claimDisabledRead(now time.Time) (next int64, ok bool) {
	if p.disabling == nil {
		return 0, false
	}
	due := p.disabledDue.Load()
	if now.UnixNano() < due {
		return 0, false
	}
	next = now.Add(DisabledRefresh).UnixNano()
	if !p.disabledDue.CompareAndSwap(due, next) {
		return 0, false
	}
	return next, true
}

// readDisabled reads which keys are out of rotation from the store, for a
// read claimed to next (claimDisabledRead). A store that fails changes
// nothing, and is read again disabledRetry later: a pool that started
// while its store was down knows of no disabled key until it reads one,
// and serves on every key meanwhile.
func (p *Pool) readDisabled(next int64) {
	p.disabledMu.Lock()
	gen := p.disabledGen
	p.disabledMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
	defer cancel()
	out, err := p.disabling.Disabled(ctx, p.provider)
	p.storeResult(opDisabled, err)
	if err != nil {
		p.disabledDue.CompareAndSwap(next, p.cfg.clock().Add(disabledRetry).UnixNano())
		return
	}
	p.disabledMu.Lock()
	defer p.disabledMu.Unlock()
	if p.disabledGen != gen {
		return // a change of this pool's since the read began stands
	}
	for _, k := range p.keys {
		d, ok := out[k.ID]
		if ok && checkBy(d.By) != nil {
			d.By = unreadableBy // a store's record another program wrote
		}
		switch cur := k.disabled.Load(); {
		case ok && (cur == nil || *cur != d):
			k.disabled.Store(&d)
		case !ok && cur != nil:
			k.disabled.Store(nil)
			p.backInRotation()
		}
	}
}

// maxBy bounds Disable's by; unreadableBy stands for a by read from a
// store that Disable would have refused.
const (
	maxBy        = 128
	unreadableBy = "(unreadable)"
)

// checkBy returns an error saying why by cannot name who disabled a key.
func checkBy(by string) error {
	switch {
	case len(by) > maxBy:
		return fmt.Errorf("who disabled it is %d bytes, more than %d", len(by), maxBy)
	case !utf8.ValidString(by):
		return errors.New("who disabled it is not UTF-8")
	case strings.ContainsFunc(by, unprintable):
		return errors.New("who disabled it holds a control or format character")
	}
	return nil
}

// unprintable reports whether r would move or hide what a terminal or a
// page shows around it: a control character, a format character (a
// direction override) or a line or paragraph separator.
func unprintable(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// operatorKey returns the key with the given ID, for an operator's call.
func (p *Pool) operatorKey(keyID string) (*poolKey, error) {
	if err := p.usable(); err == errNotNew {
		return nil, err
	}
	if k := p.keyByID(keyID); k != nil {
		return k, nil
	}
	return nil, fmt.Errorf("keypool: %s: no key with ID %q", p.provider, keyID)
}

// stateIDs returns the IDs under which a store keeps the key's state: its
// own, and its account's when it names one.
func (k *poolKey) stateIDs() []string {
	if k.Account == "" {
		return []string{k.ID}
	}
	return []string{k.ID, accountID(k.Account)}
}
