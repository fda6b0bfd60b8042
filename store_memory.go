package keypool

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// The bound on the models a store tracks for one key.
const (
	maxModelsPerKey = windowspec.MaxModelsPerKey
	overflowModel   = windowspec.OverflowModel
)

// memoryStore keeps a pool's state in memory: it is the default store, and
// the hot layer under the BadgerStore. It is safe for concurrent use; each
// key has its own lock, and looking a key up takes none.
type memoryStore struct {
	keys sync.Map // keyRef → *memKey; keys are added once and read on every request
	// accounts finds an account's entry in keys by its name, without
	// building its ID (accountID) on every request: keyRef{provider,
	// account} → *memKey.
	accounts sync.Map

	disabledMu sync.Mutex
	disabled   map[keyRef]Disabled // the keys out of rotation (DisabledStore)
}

type keyRef struct{ provider, keyID string }

// memKey is one key's state.
type memKey struct {
	mu     sync.Mutex // guards the fields below
	bench  benchState
	cap    *windows // across models; nil until a cap applies
	days   calendar // as the last take counted days
	last   int64    // the latest time a take was recorded, Unix nanoseconds
	models map[string]*memModel
	// recent is the entry of models the last call of model found, named
	// recentName: most requests name the model the one before named, and
	// find its entry without a lookup. It is never an entry models no
	// longer holds: an entry is evicted only on the way to a new one, which
	// then is recent.
	recent     *memModel
	recentName string
	spend      spend // what the key (or account) spent, by calendar day and month
	// dirty reports that the windows changed since a store that persists
	// them last wrote them; benchVer counts changes of benches and levels.
	dirty    bool
	benchVer uint64
}

// memModel is one key's state for one model. win is nil until a limit
// applies to it.
type memModel struct {
	bench   benchState
	level   int
	win     *windows
	learned Limits // the limits the vendor last stated for the model
}

// benchState is a bench in Unix nanoseconds; until 0 is none.
type benchState struct {
	kind  Kind
	until int64
}

func (b benchState) public(now int64) Bench {
	if b.until <= now {
		return Bench{}
	}
	return Bench{Kind: b.kind, Until: time.Unix(0, b.until).UTC()}
}

// shiftBack moves a bench in force at the wrong clock d nanoseconds earlier,
// never to before now.
func (b *benchState) shiftBack(d, now int64) {
	if b.until > now {
		b.until = max(b.until-d, now)
	}
}

// extend sets the bench to kind until until unless it already lasts longer.
func (b *benchState) extend(kind Kind, until int64) {
	if until > b.until {
		*b = benchState{kind: kind, until: until}
	}
}

// NewMemoryStore returns a Store that keeps state in memory, for as long as
// the process lives: the default store of a pool. Give one to several pools
// (WithStore) to share it. It is safe for concurrent use; each key has its
// own lock, and looking a key up takes none.
func NewMemoryStore() Store { return newMemoryStore() }

func newMemoryStore() *memoryStore { return &memoryStore{} }

var (
	_ Store         = (*memoryStore)(nil)
	_ SpendResetter = (*memoryStore)(nil)
	_ DisabledStore = (*memoryStore)(nil)
)

// key returns the state of a key, adding it when new.
func (s *memoryStore) key(provider, keyID string) *memKey {
	ref := keyRef{provider, keyID}
	if k, ok := s.keys.Load(ref); ok {
		return k.(*memKey)
	}
	k, _ := s.keys.LoadOrStore(ref, &memKey{models: map[string]*memModel{}})
	return k.(*memKey)
}

// account returns the state of an account, adding it when new: the entry
// of keys under its ID.
func (s *memoryStore) account(provider, account string) *memKey {
	ref := keyRef{provider, account}
	if k, ok := s.accounts.Load(ref); ok {
		return k.(*memKey)
	}
	k := s.key(provider, accountID(account))
	s.accounts.Store(ref, k) // keys never replaces an entry: any racing Store stores k too
	return k
}

// model returns the key's state for a model, adding it when new. A key
// keeps at most maxModelsPerKey models: when it has as many, a new one takes
// the place of an entry that holds nothing in force at now (see idle), and
// when none does, it shares the overflow entry — unless it is named, a model
// the pool was configured for, which always has an entry of its own. k.mu
// must be held.
func (k *memKey) model(name string, now int64, named bool) *memModel {
	if k.recent != nil && k.recentName == name {
		return k.recent
	}
	m := k.models[name]
	if m == nil && len(k.models) >= maxModelsPerKey && !named && !k.evictIdle(now) {
		// The shared entry is not kept as the model's: its next request
		// looks again for an entry of its own.
		return k.overflow()
	}
	if m == nil {
		m = &memModel{}
		k.models[name] = m
	}
	k.recent, k.recentName = m, name
	return m
}

// overflow returns the entry models beyond the bound share, adding it when
// new. k.mu must be held.
func (k *memKey) overflow() *memModel {
	m := k.models[overflowModel]
	if m == nil {
		m = &memModel{}
		k.models[overflowModel] = m
	}
	return m
}

// evictScan bounds the entries evictIdle looks at for one new model, so a
// client naming endless models costs a bounded scan a request.
const evictScan = 32

// evictIdle removes one model entry that holds nothing in force at now, and
// reports whether it found one. k.mu must be held.
func (k *memKey) evictIdle(now int64) bool {
	n := 0
	for name, m := range k.models {
		if n++; n > evictScan {
			return false
		}
		if name != overflowModel && m.idle(now, k.days) {
			delete(k.models, name)
			k.dirty = true
			return true
		}
	}
	return false
}

// idle reports whether the entry holds nothing in force at now: no bench,
// no level, windows that count nothing.
func (m *memModel) idle(now int64, c calendar) bool {
	return m.bench.until <= now && m.level == 0 && (m.win == nil || m.win.usage(now, c) == Usage{})
}

// Take implements Store.
func (s *memoryStore) Take(_ context.Context, t Claim) (Grant, error) {
	if err := windowspec.CheckModel(t.Model); err != nil {
		return Grant{}, fmt.Errorf("keypool: memory store: %w", err)
	}
	return s.takeAt(nil, nil, &t)
}

// memEntries is where a pool keeps, for one of its keys, the memory
// store's entries of the key and of its account, found by the key's first
// take: later takes look neither up. A store never replaces an entry, so
// what an entry holds never goes stale.
type memEntries struct {
	own, account atomic.Pointer[memKey]
}

// memoryBacked is the optional interface of a store whose state a
// memoryStore keeps, which a pool then takes from directly, through the
// entries each key keeps (see Pool.mem): the package's memory and Badger
// stores. memory returns that memoryStore only when the store asked is
// the receiver itself — a type that embeds one of them, and so gets the
// method, may change what its other methods do, and goes through Store.
type memoryBacked interface {
	memory(asked Store) *memoryStore
}

func (s *memoryStore) memory(asked Store) *memoryStore {
	if asked != Store(s) {
		return nil
	}
	return s
}

func (s *BadgerStore) memory(asked Store) *memoryStore {
	if asked != Store(s) {
		return nil
	}
	return s.memoryStore
}

// ownMemory returns the memory store that keeps s's state when s is one of
// the package's stores, exactly (see memoryBacked), else nil.
func ownMemory(s Store) *memoryStore {
	if m, ok := s.(memoryBacked); ok {
		return m.memory(s)
	}
	return nil
}

// entries returns the entries of t's key and account (nil when it names
// none), from e when it holds them, else looked up and kept in e.
func (s *memoryStore) entries(e *memEntries, t *Claim) (own, account *memKey) {
	if e != nil {
		own, account = e.own.Load(), e.account.Load()
	}
	if own == nil {
		own = s.key(t.Provider, t.KeyID)
		if e != nil {
			e.own.Store(own)
		}
	}
	if account == nil && t.Account != "" {
		account = s.account(t.Provider, t.Account)
		if e != nil {
			e.account.Store(account)
		}
	}
	return own, account
}

// takeAt is Take for a claim whose model is one a store may keep (the
// caller checked it: windowspec.CheckModel), from the entries e keeps (nil:
// looked up), recording an admitted request in r (nil: a reservation of
// its own). e must only ever be given claims of one provider, key and
// account.
func (s *memoryStore) takeAt(e *memEntries, r *memReservation, t *Claim) (Grant, error) {
	// The key's entry holds its own benches and spend; its account's
	// entry, when it names one, the windows and benches they share. A take
	// holds both, always the key's first.
	own, account := s.entries(e, t)
	own.mu.Lock()
	defer own.mu.Unlock()
	k := own
	if account != nil {
		k = account
		k.mu.Lock()
		defer k.mu.Unlock()
	}
	cal := days(t.DayZone, t.DayHour)
	now := k.clock(t.Now, cal)
	if k != own {
		own.clock(t.Now, cal)
	}
	m := k.model(t.Model, now, t.Named)
	if until, kind := latest(own.bench, latestBench(k.bench, m.bench)); until > now {
		return Grant{RetryAt: time.Unix(0, until).UTC(), Reason: kind, Level: m.level}, nil
	}
	lim := t.Limits.tighter(m.learned)
	tok := t.Tokens
	if c := windowspec.Tighter(lim.tokenCap(), t.Cap.tokenCap()); c > 0 {
		tok = min(tok, c)
	}
	ok, retryAt, dayFull := t.room(own, k, m, now, lim, tok, cal)
	if !ok {
		reason := KindRate
		if dayFull {
			reason = KindQuota
		}
		return Grant{RetryAt: time.Unix(0, retryAt).UTC(), Reason: reason, Level: m.level}, nil
	}
	if r == nil {
		r = new(memReservation)
	}
	t.record(r, own, k, m, now, lim, tok, cal)
	return Grant{OK: true, Level: m.level, Reservation: r}, nil
}

// room reports whether a claim of tok tokens fits, at now, the model's
// windows at lim, the key's cap across models, and the budgets of the key
// (own) and of its account (k, own when it has none); when it does not,
// when it would (retryAt) and whether a day's window or budget is what is
// full. It makes the windows a limit needs. Both keys' locks must be held.
func (t *Claim) room(own, k *memKey, m *memModel, now int64, lim Limits, tok int64, cal calendar) (ok bool, retryAt int64, dayFull bool) {
	if !lim.none() && m.win == nil {
		m.win = &windows{}
	}
	ok = true
	if m.win != nil {
		ok, retryAt, dayFull = m.win.room(now, lim, tok, cal)
	}
	if !t.Cap.none() {
		if k.cap == nil {
			k.cap = &windows{}
		}
		okCap, atCap, dayCap := k.cap.room(now, t.Cap, tok, cal)
		ok, retryAt, dayFull = ok && okCap, max(retryAt, atCap), dayFull || dayCap
	}
	if t.Budget == (Budget{}) && t.AccountBudget == (Budget{}) {
		return ok, retryAt, dayFull
	}
	budget := budgetDays(cal)
	for _, b := range [...]struct {
		k      *memKey
		budget Budget
	}{{own, t.Budget}, {k, t.AccountBudget}} {
		if b.budget == (Budget{}) {
			continue
		}
		day, month := b.budget.micros()
		if fits, at, spent := b.k.spend.room(now, t.Cost, day, month, budget); !fits {
			ok, retryAt, dayFull = false, max(retryAt, at), dayFull || spent
		}
	}
	return ok, retryAt, dayFull
}

// reserve returns what a claim that room admitted reserves of the spend of
// k, whose caps are b: its cost, or, for an unbounded claim, all that is
// left. k.mu must be held.
func (t *Claim) reserve(k *memKey, b Budget) int64 {
	if !t.Unbounded {
		return t.Cost
	}
	return max(t.Cost, k.spend.left(b.micros()))
}

// record counts a claim that room admitted in the windows and budgets it
// was checked against, into its reservation r, which must be zero. Both
// keys' locks must be held.
func (t *Claim) record(r *memReservation, own, k *memKey, m *memModel, now int64, lim Limits, tok int64, cal calendar) {
	r.spans, r.capSpans = lim.spans(), t.Cap.spans()
	if m.win != nil {
		m.win.add(now, r.spans, 1, tok, cal)
	}
	if k.cap != nil {
		k.cap.add(now, r.capSpans, 1, tok, cal)
	}
	// Fields set one by one: a struct written whole into the heap goes
	// through the collector's bulk barrier while it marks.
	r.key, r.model, r.at, r.tokens, r.days = k, m, now, tok, cal
	if t.Budget != (Budget{}) {
		c := t.reserve(own, t.Budget)
		own.spend.hold(now, c)
		own.dirty = true
		r.own, r.reserved[0], r.resets[0] = own, c, own.spend.resets
	}
	if t.AccountBudget != (Budget{}) {
		c := t.reserve(k, t.AccountBudget)
		k.spend.hold(now, c)
		r.shared, r.reserved[1], r.resets[1] = k, c, k.spend.resets
	}
	k.dirty = true
}

// clock returns the time to count a take or a statement at: the pool's
// clock t, never before the latest time the key has seen, so what is taken
// counts at least as long as it should. A step back of more than MaxStepBack
// is a clock put right after running ahead: the key's windows and benches,
// dated by the wrong clock, move back with it. k.mu must be held.
func (k *memKey) clock(t time.Time, days calendar) int64 {
	n := t.UnixNano()
	if k.last-n > int64(windowspec.MaxStepBack) {
		k.shiftBack(k.last-n, n, days)
	}
	now := max(n, k.last)
	k.last = now
	if k.days != days {
		k.days = days // seldom changes: the write of its zone is spared
	}
	return now
}

// scope returns the entry that keeps what a statement or a bench of model
// is about: its account's when it names one, else its key's.
func (s *memoryStore) scope(provider, keyID, account, model string) (*memKey, error) {
	if err := windowspec.CheckModel(model); err != nil {
		return nil, fmt.Errorf("keypool: memory store: %w", err)
	}
	if account != "" {
		return s.account(provider, account), nil
	}
	return s.key(provider, keyID), nil
}

// Learn implements Store.
func (s *memoryStore) Learn(_ context.Context, st Stated) error {
	k, err := s.scope(st.Provider, st.KeyID, st.Account, st.Model)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	cal := days(st.DayZone, st.DayHour)
	now := k.clock(st.Now, cal)
	k.learn(k.model(st.Model, now, false), st.Limits, st.Used, unixOrZero(st.MinuteReset), unixOrZero(st.DayReset), now, cal)
	return nil
}

// learn is Learn for the request r admitted, of what its answer stated
// (s) at now, the pool's clock: it learns into the entries the take counted
// in, without looking them up (or checking the model) again, as Learn
// learns a Stated built of the same.
func (r *memReservation) learn(s *statedWindows, now time.Time) {
	var minuteLeaves, dayLeaves int64
	if s.minuteWait > 0 {
		minuteLeaves = now.UnixNano() + int64(s.minuteWait)
	}
	if s.dayWait > 0 {
		dayLeaves = now.UnixNano() + int64(s.dayWait)
	}
	r.key.mu.Lock()
	defer r.key.mu.Unlock()
	r.key.learn(r.model, s.limits, s.used, minuteLeaves, dayLeaves, r.key.clock(now, r.days), r.days)
}

// learn records in m, the key's entry for a model, what a vendor stated at
// now: its limits, and how much of each window it counted (used; a
// negative field unknown), which the windows are raised to so that the
// difference leaves the minute's at minuteLeaves and the day's at
// dayLeaves (Unix nanoseconds; 0 is a whole window from now). k.mu must be
// held.
func (k *memKey) learn(m *memModel, limits, used Limits, minuteLeaves, dayLeaves, now int64, cal calendar) {
	m.learned = m.learned.over(limits)
	k.dirty = true
	if used.RPM < 0 && used.RPD < 0 && used.TPM < 0 && used.TPD < 0 {
		return
	}
	if m.win == nil {
		m.win = &windows{}
	}
	m.win.raise(now, used, minuteLeaves, dayLeaves, cal)
}

// unixOrZero returns t in Unix nanoseconds, or 0 for the zero time.
func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// latestBench returns the later of two benches.
func latestBench(a, b benchState) benchState {
	if b.until > a.until {
		return b
	}
	return a
}

// memReservation is what a MemoryStore recorded for one admitted request:
// the key's and the model's state, so that settling looks nothing up, and
// what the take counted.
type memReservation struct {
	key   *memKey
	model *memModel
	// own and shared are the entries whose spend counts the cost: the
	// key's, for its budget, and its account's; nil where no budget is.
	own, shared *memKey
	days        calendar
	at          int64 // when the take was recorded, Unix nanoseconds
	tokens      int64 // the tokens it counts now
	// reserved is, until the take settles, what it reserves of the
	// spends of own and shared, in millionths of a dollar, as of their
	// resets; once it has settled, reserved[0] is what it spent. (One
	// pair for both keeps a reservation in the allocator's 96 bytes.)
	reserved [2]int64
	resets   [2]uint32
	// spans and capSpans are the windows the take counted in: of the
	// model's set, and of the key's cap across models.
	spans, capSpans spans
	settled         bool
	released        bool
}

// Settle implements Reservation.
func (r *memReservation) Settle(_ context.Context, tokens, cost int64) error {
	r.lock()
	defer r.unlock()
	if !r.released {
		tokens, cost = max(tokens, 0), max(cost, 0)
		r.add(0, tokens-r.tokens)
		r.spend(cost)
		r.tokens = tokens
	}
	return nil
}

// Release implements Reservation.
func (r *memReservation) Release(context.Context) error {
	r.lock()
	defer r.unlock()
	if !r.released {
		r.add(-1, -r.tokens)
		r.spend(0)
		r.released = true
	}
	return nil
}

// spend makes cost what the take spent: what it reserved is no longer
// held, unless the spend was reset since. The entries' locks must be held.
func (r *memReservation) spend(cost int64) {
	if r.own == nil && r.shared == nil {
		return // no budget: most requests
	}
	for i, k := range [...]*memKey{r.own, r.shared} {
		if k == nil {
			continue
		}
		at := r.at
		if at > k.last && !k.spend.day.holds(at) {
			// Recorded before the clock was put back, and carried since
			// into the day that holds the key's time (period.roll).
			at = k.last
		}
		switch {
		case r.settled:
			k.spend.add(at, cost-r.reserved[0])
		default:
			if r.resets[i] == k.spend.resets {
				k.spend.hold(at, -r.reserved[i])
			}
			k.spend.add(at, cost)
		}
		k.dirty = true
	}
	r.settled, r.reserved = true, [2]int64{cost, 0}
}

// lock takes the locks of the entries the reservation changes, the key's
// before its account's, as Take does.
func (r *memReservation) lock() {
	if r.own != nil && r.own != r.key {
		r.own.mu.Lock()
	}
	r.key.mu.Lock()
}

func (r *memReservation) unlock() {
	r.key.mu.Unlock()
	if r.own != nil && r.own != r.key {
		r.own.mu.Unlock()
	}
}

// add changes what the take recorded in the windows by req requests and
// tok tokens. A take dated after the latest time its key has seen was
// recorded before the clock was put back (shiftBack): it stays counted as
// it was moved, and what it would change is dropped, as the Redis store
// drops it. The entries' locks must be held.
func (r *memReservation) add(req, tok int64) {
	if req == 0 && tok == 0 || r.at > r.key.last {
		return
	}
	if r.model.win != nil {
		r.model.win.add(r.at, r.spans, req, tok, r.days)
	}
	if r.key.cap != nil {
		r.key.cap.add(r.at, r.capSpans, req, tok, r.days)
	}
	r.key.dirty = true
}

// shiftBack moves the key's windows and benches d nanoseconds earlier, to
// now, after the clock that dated them was put back by d: what was taken
// still counts, for as long as it should from the corrected clock, and a
// bench ends as long after it began as it was meant to. k.mu must be held.
func (k *memKey) shiftBack(d, now int64, c calendar) {
	shift := func(w *windows) {
		if w != nil {
			w.shiftBack(d, now, c)
		}
	}
	shift(k.cap)
	k.bench.shiftBack(d, now)
	for _, m := range k.models {
		shift(m.win)
		m.bench.shiftBack(d, now)
	}
	k.last = now
	k.dirty = true
	k.benchVer++
}

// latest returns the end and kind of the later of two benches.
func latest(a, b benchState) (int64, Kind) {
	l := latestBench(a, b)
	return l.until, l.kind
}

// Bench implements Store.
func (s *memoryStore) Bench(_ context.Context, b Bench) error {
	k, err := s.scope(b.Provider, b.KeyID, b.Account, b.Model)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.benchVer++
	if b.AllModels {
		if !b.Until.IsZero() {
			k.bench.extend(b.Kind, b.Until.UnixNano())
		}
		return nil
	}
	m := k.model(b.Model, k.last, false)
	if !b.Until.IsZero() {
		m.bench.extend(b.Kind, b.Until.UnixNano())
	}
	m.level = b.Level
	return nil
}

// Unbench implements Store. It also forgets what the key's windows count
// and the limits they learned: an answer's statement of a spent day, or a
// settle of its usage, is lifted as a bench is. The windows are emptied in
// place, so that a request in flight settles into them as before.
func (s *memoryStore) Unbench(_ context.Context, provider, keyID string) error {
	k := s.key(provider, keyID)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.benchVer++
	k.dirty = true
	k.bench = benchState{}
	if k.cap != nil {
		*k.cap = windows{}
	}
	for _, m := range k.models {
		m.bench, m.level, m.learned = benchState{}, 0, Limits{}
		if m.win != nil {
			*m.win = windows{}
		}
	}
	return nil
}

// ResetSpend implements SpendResetter.
func (s *memoryStore) ResetSpend(_ context.Context, provider, keyID string) error {
	k := s.key(provider, keyID)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.spend.reset()
	k.dirty = true
	return nil
}

// SetDisabled implements DisabledStore.
func (s *memoryStore) SetDisabled(_ context.Context, provider, keyID string, d *Disabled) error {
	s.disabledMu.Lock()
	defer s.disabledMu.Unlock()
	ref := keyRef{provider, keyID}
	if d == nil {
		delete(s.disabled, ref)
		return nil
	}
	if s.disabled == nil {
		s.disabled = map[keyRef]Disabled{}
	}
	s.disabled[ref] = *d
	return nil
}

// Disabled implements DisabledStore.
func (s *memoryStore) Disabled(_ context.Context, provider string) (map[string]Disabled, error) {
	s.disabledMu.Lock()
	defer s.disabledMu.Unlock()
	out := map[string]Disabled{}
	for ref, d := range s.disabled {
		if ref.provider == provider {
			out[ref.keyID] = d
		}
	}
	return out, nil
}

// State implements Store.
func (s *memoryStore) State(_ context.Context, provider, keyID string, now time.Time) (KeyStats, error) {
	k := s.key(provider, keyID)
	n := now.UnixNano()
	k.mu.Lock()
	defer k.mu.Unlock()
	st := KeyStats{Bench: k.bench.public(n), Models: make([]ModelStats, 0, len(k.models))}
	day, month := k.spend.spent(n)
	st.Spent = Budget{PerDay: fromMicros(day), PerMonth: fromMicros(month)}
	if k.cap != nil {
		st.Cap = k.cap.usage(n, k.days)
	}
	for name, m := range k.models {
		ms := ModelStats{Model: name, Bench: m.bench.public(n), Level: m.level, Learned: m.learned}
		if m.win != nil {
			ms.Usage = m.win.usage(n, k.days)
		}
		st.Models = append(st.Models, ms)
	}
	return st, nil
}

// Keys yields the provider and ID of each key the store holds state for,
// in no particular order: an account's under its account ID, and a key out
// of rotation (DisabledStore) though it holds nothing else.
func (s *memoryStore) Keys() iter.Seq2[string, string] {
	return func(yield func(provider, keyID string) bool) {
		more := true
		s.keys.Range(func(ref, _ any) bool {
			r := ref.(keyRef)
			more = yield(r.provider, r.keyID)
			return more
		})
		if !more {
			return
		}
		s.disabledMu.Lock()
		var disabled []keyRef
		for ref := range s.disabled {
			if _, ok := s.keys.Load(ref); !ok {
				disabled = append(disabled, ref)
			}
		}
		s.disabledMu.Unlock()
		for _, r := range disabled {
			if !yield(r.provider, r.keyID) {
				return
			}
		}
	}
}

// each calls fn for every key the store holds.
func (s *memoryStore) each(fn func(ref keyRef, k *memKey)) {
	s.keys.Range(func(ref, k any) bool {
		fn(ref.(keyRef), k.(*memKey))
		return true
	})
}

// Flush implements Store: a MemoryStore keeps nothing elsewhere.
func (s *memoryStore) Flush(context.Context) error { return nil }
