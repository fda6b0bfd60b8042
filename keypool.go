// Package keypool turns several API keys for one vendor into one dependable
// client.
//
// A Pool holds the keys. Its Transport is an [http.RoundTripper] that goes
// into any [http.Client] — and so under vendor SDKs and go-retryablehttp. For
// each request it picks a key (free keys round-robin, paid keys only when no
// free key can take the request), puts the key on the request, refuses what
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
package keypool

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

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
	// Paid keys are used only when no free key can take a request.
	Paid bool
	// Limits, when set, override the pool's limits for this key field by
	// field (WithLimits, WithModelLimits).
	Limits Limits
}

// Limits are a key's request and token limits per minute and per day. A zero
// field is no limit on that axis.
type Limits struct {
	RPM, RPD, TPM, TPD int64
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

// tokenCap returns the smallest token limit of l, or 0 if l has none.
func (l Limits) tokenCap() int64 { return windowspec.Tighter(l.TPM, l.TPD) }

func (l Limits) validate() error {
	if l.RPM < 0 || l.RPD < 0 || l.TPM < 0 || l.TPD < 0 {
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

// String returns the key's ID and tier, never its secret.
func (k Key) String() string {
	tier := "free"
	if k.Paid {
		tier = "paid"
	}
	return "key " + k.id() + " (" + tier + ")"
}

// Format prints the key as String does, for every verb: %v, %+v, %#v and %s
// all show the ID only.
func (k Key) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "keypool.Key{ID:%q, Paid:%t, Secret:\"[redacted]\"}", k.id(), k.Paid)
		return
	}
	fmt.Fprint(f, k.String())
}

// Pool spreads requests over the keys of one vendor. It is safe for
// concurrent use by multiple goroutines.
type Pool struct {
	provider string
	cfg      config
	store    Store
	keys     []*poolKey // in the order given
	free     []*poolKey
	paid     []*poolKey
	freeNext atomic.Uint64 // round-robin cursor over free
	paidNext atomic.Uint64 // round-robin cursor over paid
	// needTokens reports that some token limit applies, so requests are
	// estimated and answers settled.
	needTokens bool
	closed     atomic.Bool
	tel        *telemetry
	lines      waitLines // requests waiting for a key, by model
	models     names     // the model names requests have named
}

// poolKey is a key as the pool holds it.
type poolKey struct {
	Key
	index int
	// auth is the value the key is put on a request with, built once: a
	// header value as a one-element slice, or "param=secret" for a query.
	auth []string
	// sent counts the requests sent with the key; answers counts their
	// answers by kind.
	sent    atomic.Int64
	answers [len(kindNames)]atomic.Int64
	tel     keyTelemetry
	// benchedUntil is the end of the latest bench this pool set on the key,
	// for any model, in Unix nanoseconds.
	benchedUntil atomic.Int64

	lastMu sync.Mutex // guards last and lastAt
	last   Reading    // what the vendor last said of the key's windows
	lastAt time.Time
}

// New returns a pool over keys for provider, a name used in stats, errors,
// telemetry and stores (such as "openai" or "gemini"). It returns an error
// naming what is wrong for: no keys, a key without a secret, two keys with
// the same secret or ID, a negative limit, or a bad option. The keys are
// copied.
func New(provider string, keys []Key, opts ...Option) (*Pool, error) {
	cfg := newConfig(opts)
	if err := errors.Join(cfg.errs...); err != nil {
		return nil, fmt.Errorf("keypool: %s: %w", provider, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("keypool: %s: no keys", provider)
	}
	p := &Pool{provider: provider, cfg: cfg, store: cfg.store}
	if p.store == nil {
		p.store = NewMemoryStore()
	}
	if err := p.addKeys(keys); err != nil {
		return nil, fmt.Errorf("keypool: %s: %w", provider, err)
	}
	if err := validateLimits(&cfg); err != nil {
		return nil, fmt.Errorf("keypool: %s: %w", provider, err)
	}
	p.tel = newTelemetry(p)
	for _, k := range p.keys {
		k.tel = p.tel.forKey(provider, k)
	}
	p.needTokens = cfg.limits.hasTokens() || cfg.keyCap.hasTokens()
	for _, l := range cfg.modelLimits {
		p.needTokens = p.needTokens || l.hasTokens()
	}
	for _, k := range p.keys {
		p.needTokens = p.needTokens || k.Limits.hasTokens()
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
		pk := &poolKey{Key: k, index: i, auth: p.cfg.auth.value(k.Secret)}
		p.keys = append(p.keys, pk)
		if k.Paid {
			p.paid = append(p.paid, pk)
		} else {
			p.free = append(p.free, pk)
		}
	}
	return nil
}

func validateLimits(c *config) error {
	if err := c.limits.validate(); err != nil {
		return fmt.Errorf("pool limits: %w", err)
	}
	if err := c.keyCap.validate(); err != nil {
		return fmt.Errorf("key cap: %w", err)
	}
	for m, l := range c.modelLimits {
		if err := l.validate(); err != nil {
			return fmt.Errorf("limits of model %q: %w", m, err)
		}
	}
	return nil
}

// limits returns the limits of key k for model.
func (p *Pool) limits(k *poolKey, model string) Limits {
	l := p.cfg.limits
	if len(p.cfg.modelLimits) != 0 {
		if ml, ok := p.cfg.modelLimits[model]; ok {
			l = l.over(ml)
		}
	}
	return l.over(k.Limits)
}

// single reports that the pool has one key, which is never benched: with
// nothing to rotate to, the vendor's answer goes to the caller untouched.
func (p *Pool) single() bool { return len(p.keys) == 1 }

// lease is one key taken for one attempt.
type lease struct {
	key   *poolKey
	take  Take
	grant Grant
}

// call is what one request remembers across its attempts: the keys that
// failed it, and the soonest moment a key it saw comes back.
type call struct {
	tried   keySet
	soonest time.Time
}

func (c *call) sooner(t time.Time) {
	if !t.IsZero() && (c.soonest.IsZero() || t.Before(c.soonest)) {
		c.soonest = t
	}
}

// acquire takes the first key in order that can take a request for model of
// tokens tokens: free keys round-robin, then paid keys round-robin, each
// only if c has not tried it. When none can, it returns a
// *NoAvailableKeyError.
func (p *Pool) acquire(ctx context.Context, c *call, model string, tokens int64) (lease, error) {
	if p.closed.Load() {
		return lease{}, fmt.Errorf("keypool: %s: pool is closed", p.provider)
	}
	if err := ctx.Err(); err != nil {
		return lease{}, err
	}
	now := p.cfg.clock()
	l, ok, err := p.scan(ctx, c, p.free, &p.freeNext, model, tokens, now)
	if ok || err != nil {
		return l, err
	}
	l, ok, err = p.scan(ctx, c, p.paid, &p.paidNext, model, tokens, now)
	if ok || err != nil {
		return l, err
	}
	wait := time.Duration(0)
	if !c.soonest.IsZero() {
		wait = max(c.soonest.Sub(now), 0)
	}
	return lease{}, &NoAvailableKeyError{Provider: p.provider, RetryAt: c.soonest, wait: wait}
}

// scan offers the request to the keys of one tier, starting at the cursor.
func (p *Pool) scan(ctx context.Context, c *call, keys []*poolKey, cursor *atomic.Uint64, model string, tokens int64, now time.Time) (lease, bool, error) {
	n := uint64(len(keys))
	if n == 0 {
		return lease{}, false, nil
	}
	start := cursor.Add(1) - 1
	for i := range n {
		k := keys[(start+i)%n]
		if c.tried.has(k.index) {
			continue
		}
		t := Take{Provider: p.provider, KeyID: k.ID, Model: model, Limits: p.limits(k, model), Cap: p.cfg.keyCap, Days: p.cfg.days, Now: now}
		t.Tokens = tokens
		if limit := windowspec.Tighter(t.Limits.tokenCap(), t.Cap.tokenCap()); limit > 0 {
			t.Tokens = min(tokens, limit)
		}
		g, err := p.store.Take(ctx, t)
		if err != nil {
			return lease{}, false, fmt.Errorf("keypool: %s: store: %w", p.provider, err)
		}
		if g.OK {
			return lease{key: k, take: t, grant: g}, true, nil
		}
		c.sooner(g.RetryAt)
	}
	return lease{}, false, nil
}

// observe records what an answer said of a lease's key: counts, readings,
// the end of a quota ladder on success, and a bench on failure. It returns
// when the key comes back if it was benched.
func (p *Pool) observe(ctx context.Context, l *lease, v verdict, now time.Time) time.Time {
	l.key.answers[v.kind].Add(1)
	p.tel.answered(ctx, l.key, v)
	if v.reset.HasUtilization || !v.reset.ResetAt.IsZero() {
		r := Reading{Provider: p.provider, KeyID: l.key.ID, Model: l.take.Model,
			Window: v.reset.Window, Utilization: v.reset.Utilization, ResetAt: v.reset.ResetAt}
		l.key.lastMu.Lock()
		l.key.last, l.key.lastAt = r, now
		l.key.lastMu.Unlock()
		if f := p.cfg.onRateLimit; f != nil && v.reset.Window != WindowNone {
			f(r)
		}
	}
	if p.single() || v.oversized {
		return time.Time{} // an oversized request is no fault of the key's
	}
	if v.kind == KindNone {
		if l.grant.Level > 0 {
			_ = p.store.ResetLevel(ctx, p.provider, l.key.ID, l.take.Model)
		}
		if !v.reset.exhausted(now) || l.take.Limits != (Limits{}) {
			return time.Time{}
		}
		// The answer went through but says its window is spent: set the key
		// aside until the window resets, before the vendor answers 429. A
		// key whose limits the pool was told needs none of this: its own
		// windows refuse until the next slot frees, where a vendor's reset
		// (OpenAI's: until the window is whole again) would idle it longer. A
		// window that lifts beyond longThrottle is a quota, named or not.
		v.kind = KindRate
		if v.reset.Window != WindowNone || v.reset.ResetAt.Sub(now) > longThrottle {
			v.kind = KindQuota
		}
	}
	d, climb := p.cfg.bench.benchFor(v, l.grant.Level, now)
	level := l.grant.Level
	if climb {
		level++
	}
	b := Bench{Provider: p.provider, KeyID: l.key.ID, Model: l.take.Model, AllModels: v.wholeKey(),
		Kind: v.kind, Until: now.Add(d), Level: level}
	_ = p.store.Bench(ctx, b)
	p.tel.benched(ctx, l.key, v.kind)
	for until := b.Until.UnixNano(); ; {
		cur := l.key.benchedUntil.Load()
		if until <= cur || l.key.benchedUntil.CompareAndSwap(cur, until) {
			break
		}
	}
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

// Do calls fn with a key of the pool, in the same order and with the same
// benches as the Transport, for clients that are not HTTP. When fn returns
// an error that is (or wraps) a *ProviderError of a failing kind, the key is
// benched by that error and, if another key can take the call, fn is called
// again with it, each key at most once. Any other error benches nothing and
// is returned as is. When no key can take the call, Do returns a
// *NoAvailableKeyError that also wraps the last error of fn.
func (p *Pool) Do(ctx context.Context, model string, fn func(ctx context.Context, k Key) error) error {
	var c call
	var last error
	for {
		l, err := p.take(ctx, &c, model, 0)
		if err != nil {
			var na *NoAvailableKeyError
			if errors.As(err, &na) && last != nil {
				na.last = last
			}
			return err
		}
		p.sent(&l)
		err = fn(ctx, l.key.Key)
		now := p.cfg.clock()
		v := verdictOf(err, now)
		c.sooner(p.observe(ctx, &l, v, now))
		if err == nil || v.kind == KindNone || p.single() {
			return err
		}
		c.tried.add(l.key.index)
		last = err
	}
}

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

// sent counts a lease's request as sent.
func (p *Pool) sent(l *lease) { l.key.sent.Add(1) }

// KeyStats is what a pool knows of one key.
type KeyStats struct {
	ID   string
	Paid bool
	// Bench is the bench that holds the key for every model; zero when
	// none does.
	Bench BenchState
	// Cap is what the key has used across its models.
	Cap Usage
	// Models holds the key's state per model it has served, by model name.
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
}

// ModelStats is what a pool knows of one key for one model.
type ModelStats struct {
	Model  string
	Limits Limits
	Bench  BenchState
	// Level is the number of quota answers without a date since the key's
	// last success for the model.
	Level int
	Usage Usage
}

// Stats returns what the pool knows of each key, in the order the keys were
// given. It asks the store, and leaves out what a failing store cannot say.
func (p *Pool) Stats() []KeyStats {
	now := p.cfg.clock()
	out := make([]KeyStats, 0, len(p.keys))
	for _, k := range p.keys {
		ks := KeyStats{ID: k.ID, Paid: k.Paid, Sent: k.sent.Load(), Answers: map[Kind]int64{}}
		k.lastMu.Lock()
		ks.Last, ks.LastAt = k.last, k.lastAt
		k.lastMu.Unlock()
		for kind := range k.answers {
			if n := k.answers[kind].Load(); n != 0 {
				ks.Answers[Kind(kind)] = n
			}
		}
		if st, err := p.store.State(context.Background(), p.provider, k.ID, now); err == nil {
			ks.Bench, ks.Cap = st.Bench, st.Cap
			for _, m := range st.Models {
				ks.Models = append(ks.Models, ModelStats{Model: m.Model, Limits: p.limits(k, m.Model),
					Bench: m.Bench, Level: m.Level, Usage: m.Usage})
			}
			slices.SortFunc(ks.Models, func(a, b ModelStats) int { return cmp.Compare(a.Model, b.Model) })
		}
		out = append(out, ks)
	}
	return out
}

// Close flushes the pool's state to its store and stops the pool: later
// requests fail. It does not close a store given with WithStore.
func (p *Pool) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.tel.close()
	if err := p.store.Flush(context.Background()); err != nil {
		return fmt.Errorf("keypool: %s: flushing store: %w", p.provider, err)
	}
	return nil
}

// available returns how many keys no bench of this pool holds at now, for
// any model.
func (p *Pool) available(now time.Time) int {
	n := 0
	for _, k := range p.keys {
		if k.benchedUntil.Load() <= now.UnixNano() {
			n++
		}
	}
	return n
}

// Unbench lifts every bench of the key with the given ID and resets its
// quota ladder: an operator's manual reset, for a key that was fixed (a
// topped-up balance, a renewed key). It returns an error for an unknown ID
// or a failing store.
func (p *Pool) Unbench(keyID string) error {
	for _, k := range p.keys {
		if k.ID != keyID {
			continue
		}
		if err := p.store.Unbench(context.Background(), p.provider, keyID); err != nil {
			return fmt.Errorf("keypool: %s: unbench %s: %w", p.provider, keyID, err)
		}
		k.benchedUntil.Store(0)
		return nil
	}
	return fmt.Errorf("keypool: %s: no key with ID %q", p.provider, keyID)
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
