// Package mapstore is an example of writing a keypool.Store outside the
// keypool module: one mutex over maps, with each window a log of the
// requests it counts. It uses keypool's exported API only, keeps the
// conventions keypool.Store's doc lists, and passes storetest.Run and
// storetest.Parity (with Harness.ExactTimes: its sliding windows count every
// request by its own time, where the MemoryStore counts in buckets above a
// request limit of 81 a minute or 25 a day). Copy it as a start for a store
// of your own.
//
// It keeps everything in memory and favours plain code over speed: a take
// scans the logs of its key, which hold at most a day of requests.
package mapstore

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/keypool-go/keypool"
)

// Store is a keypool.Store in maps. The zero Store is not ready: use New.
// It is safe for concurrent use.
type Store struct {
	mu   sync.Mutex // guards keys, and everything they hold
	keys map[ref]*key
}

// New returns an empty Store.
func New() *Store { return &Store{keys: map[ref]*key{}} }

var (
	_ keypool.Store         = (*Store)(nil)
	_ keypool.SpendResetter = (*Store)(nil)
)

// ref names a key, or an account under keypool.AccountID.
type ref struct{ provider, id string }

// key is the state of a key or of an account.
type key struct {
	bench  bench // of every model
	models map[string]*model
	cap    []*entry // the requests counted across models (Claim.Cap)
	costs  []*cost  // what was spent or is reserved
	resets int      // counts ResetSpend: a reservation from before holds nothing
	days   calendar // how the latest take counted days
	last   time.Time
}

// model is the state of a key for one model.
type model struct {
	bench   bench
	level   int
	learned keypool.Limits
	log     []*entry // the requests counted in the model's windows
}

type bench struct {
	kind  keypool.Kind
	until time.Time
}

// entry is one request (or, from a vendor's statement, several) in a log.
type entry struct {
	at               time.Time
	requests, tokens int64
	minute, day      bool // the windows it counts in
}

// cost is what one request spent, or reserves while held, in millionths
// of a dollar.
type cost struct {
	at     time.Time
	amount int64
	held   bool
}

// calendar says how day windows count: sliding when zone is nil.
type calendar struct {
	zone *time.Location
	hour int
}

func (s *Store) key(provider, id string) *key {
	k := s.keys[ref{provider, id}]
	if k == nil {
		k = &key{models: map[string]*model{}}
		s.keys[ref{provider, id}] = k
	}
	return k
}

// scope returns the key that keeps an account's state when account is
// set, else the key's own.
func (s *Store) scope(provider, keyID, account string) *key {
	if account != "" {
		return s.key(provider, keypool.AccountID(account))
	}
	return s.key(provider, keyID)
}

// clock returns the time to count at: t, never before the latest time the
// key has seen, so that nothing counts shorter than it should.
func (k *key) clock(t time.Time) time.Time {
	if t.After(k.last) {
		k.last = t
	}
	return k.last
}

// model returns the key's entry for a model, making it when new. Past
// keypool.MaxModelsPerKey, a new model takes the place of an idle one, or
// else shares keypool.OverflowModel's entry, unless it is named.
func (k *key) model(name string, now time.Time, named bool) *model {
	if m := k.models[name]; m != nil {
		return m
	}
	if len(k.models) >= keypool.MaxModelsPerKey && !named && !k.evictIdle(now) {
		name = keypool.OverflowModel
		if m := k.models[name]; m != nil {
			return m
		}
	}
	m := &model{}
	k.models[name] = m
	return m
}

// evictIdle removes one model that holds nothing in force at now.
func (k *key) evictIdle(now time.Time) bool {
	for name, m := range k.models {
		if name != keypool.OverflowModel && !m.bench.until.After(now) && m.level == 0 &&
			usage(m.log, now, k.days) == (keypool.Usage{}) {
			delete(k.models, name)
			return true
		}
	}
	return false
}

// Take implements keypool.Store.
func (s *Store) Take(_ context.Context, c keypool.Claim) (keypool.Grant, error) {
	if err := keypool.CheckModel(c.Model); err != nil {
		return keypool.Grant{}, fmt.Errorf("mapstore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	own := s.key(c.Provider, c.KeyID)
	k := s.scope(c.Provider, c.KeyID, c.Account) // the windows and benches it counts in
	days := calendar{c.DayZone, c.DayHour}
	now := k.clock(c.Now)
	own.clock(c.Now)
	k.days, own.days = days, days
	m := k.model(c.Model, now, c.Named)

	if b := later(own.bench, later(k.bench, m.bench)); b.until.After(now) {
		return keypool.Grant{RetryAt: b.until.UTC(), Reason: b.kind, Level: m.level}, nil
	}
	lim := tighter(c.Limits, m.learned)
	tokens := c.Tokens
	if most := least(tokenCap(lim), tokenCap(c.Cap)); most > 0 {
		tokens = min(tokens, most)
	}

	// Every window and budget has its say; the request waits for the last.
	ok, retryAt, dayFull := room(m.log, now, lim, tokens, days)
	if okCap, at, day := room(k.cap, now, c.Cap, tokens, days); !okCap {
		ok, retryAt, dayFull = false, maxTime(retryAt, at), dayFull || day
	}
	for _, b := range []struct {
		k      *key
		budget keypool.Budget
	}{{own, c.Budget}, {k, c.AccountBudget}} {
		if fits, at, spent := b.k.budgetRoom(now, c.Cost, b.budget, days); !fits {
			ok, retryAt, dayFull = false, maxTime(retryAt, at), dayFull || spent
		}
	}
	if !ok {
		reason := keypool.KindRate
		if dayFull {
			reason = keypool.KindQuota
		}
		return keypool.Grant{RetryAt: retryAt.UTC(), Reason: reason, Level: m.level}, nil
	}

	r := &reservation{s: s, tokens: tokens}
	r.model = record(&m.log, now, lim, 1, tokens)
	r.cap = record(&k.cap, now, c.Cap, 1, tokens)
	if c.Budget != (keypool.Budget{}) {
		r.own = own.reserve(now, c, c.Budget)
	}
	if c.AccountBudget != (keypool.Budget{}) {
		r.account = k.reserve(now, c, c.AccountBudget)
	}
	return keypool.Grant{OK: true, Level: m.level, Reservation: r}, nil
}

// record adds an entry at now to log, in the windows lim sets; nil when it
// sets none.
func record(log *[]*entry, now time.Time, lim keypool.Limits, requests, tokens int64) *entry {
	e := &entry{at: now, requests: requests, tokens: tokens,
		minute: lim.RPM != 0 || lim.TPM != 0, day: lim.RPD != 0 || lim.TPD != 0}
	if !e.minute && !e.day {
		return nil
	}
	// Drop what no window counts any more: a calendar day lasts at most 25
	// hours.
	*log = slices.DeleteFunc(*log, func(e *entry) bool { return now.Sub(e.at) > 26*time.Hour })
	*log = append(*log, e)
	return e
}

// room reports whether log has room at now for one more request of tokens
// under lim; when not, when it will, and whether a day window is full.
func room(log []*entry, now time.Time, lim keypool.Limits, tokens int64, days calendar) (ok bool, retryAt time.Time, dayFull bool) {
	ok = true
	if lim.RPM != 0 || lim.TPM != 0 {
		if fits, at := slide(log, now, time.Minute, false, lim.RPM, lim.TPM, tokens); !fits {
			ok, retryAt = false, at
		}
	}
	if lim.RPD == 0 && lim.TPD == 0 {
		return ok, retryAt, false
	}
	if days.zone == nil {
		if fits, at := slide(log, now, 24*time.Hour, true, lim.RPD, lim.TPD, tokens); !fits {
			ok, retryAt, dayFull = false, maxTime(retryAt, at), true
		}
		return ok, retryAt, dayFull
	}
	start, end := keypool.CalendarDay(now, days.hour, days.zone)
	r, t := calendarUsed(log, start, end)
	if (lim.RPD != 0 && r+1 > lim.RPD) || (lim.TPD != 0 && t+tokens > lim.TPD) {
		ok, retryAt, dayFull = false, maxTime(retryAt, end), true
	}
	return ok, retryAt, dayFull
}

// slide is room for a sliding window of span (the day's, or the minute's):
// each entry counts from its time, rounded up to the millisecond, for the
// span. When the window is full, the request fits once enough of the
// oldest entries have left.
func slide(log []*entry, now time.Time, span time.Duration, day bool, maxReq, maxTok, tokens int64) (bool, time.Time) {
	live := window(log, now, span, day)
	var req, tok int64
	for _, e := range live {
		req, tok = req+e.requests, tok+e.tokens
	}
	fits := func(freedReq, freedTok int64) bool {
		return (maxReq == 0 || req-freedReq+1 <= maxReq) && (maxTok == 0 || tok-freedTok+tokens <= maxTok)
	}
	if fits(0, 0) {
		return true, time.Time{}
	}
	var freedReq, freedTok int64
	for _, e := range live {
		freedReq, freedTok = freedReq+e.requests, freedTok+e.tokens
		if fits(freedReq, freedTok) {
			return false, leaves(e.at, span)
		}
	}
	// The request alone is over a limit: no wait mends it; the window is
	// clear a span after its latest entry.
	if len(live) == 0 {
		return false, time.UnixMilli(now.UnixMilli()).Add(span)
	}
	return false, leaves(live[len(live)-1].at, span)
}

// window returns the entries of log in a sliding window (the day's, or
// the minute's) of span at now, oldest first.
func window(log []*entry, now time.Time, span time.Duration, day bool) []*entry {
	var live []*entry
	for _, e := range log {
		released := e.requests == 0 && e.tokens == 0
		if !released && (day && e.day || !day && e.minute) && leaves(e.at, span).UnixMilli() > now.UnixMilli() {
			live = append(live, e)
		}
	}
	slices.SortStableFunc(live, func(a, b *entry) int { return leaves(a.at, 0).Compare(leaves(b.at, 0)) })
	return live
}

// leaves returns when an entry taken at at leaves a window of span: at,
// rounded up to the millisecond, plus the span and keypool.ExactGuard.
func leaves(at time.Time, span time.Duration) time.Time {
	ms := (at.UnixNano() + 999_999) / 1_000_000
	return time.UnixMilli(ms).Add(span + keypool.ExactGuard)
}

// calendarUsed returns what log counts in the calendar day [start, end).
func calendarUsed(log []*entry, start, end time.Time) (requests, tokens int64) {
	for _, e := range log {
		if e.day && !e.at.Before(start) && e.at.Before(end) {
			requests, tokens = requests+e.requests, tokens+e.tokens
		}
	}
	return requests, tokens
}

// usage returns what log counts at now.
func usage(log []*entry, now time.Time, days calendar) keypool.Usage {
	var u keypool.Usage
	for _, e := range window(log, now, time.Minute, false) {
		u.MinuteRequests, u.MinuteTokens = u.MinuteRequests+e.requests, u.MinuteTokens+e.tokens
	}
	if days.zone != nil {
		start, end := keypool.CalendarDay(now, days.hour, days.zone)
		u.DayRequests, u.DayTokens = calendarUsed(log, start, end)
		return u
	}
	for _, e := range window(log, now, 24*time.Hour, true) {
		u.DayRequests, u.DayTokens = u.DayRequests+e.requests, u.DayTokens+e.tokens
	}
	return u
}

// budgetDays returns the calendar budgets count by: the claim's calendar
// days, or midnight UTC when days slide.
func budgetDays(days calendar) calendar {
	if days.zone == nil {
		return calendar{zone: time.UTC}
	}
	return days
}

// spent returns what the key spent, and what requests in flight reserve,
// in the day and the month that hold now.
func (k *key) spent(now time.Time, days calendar) (day, dayHeld, month, monthHeld int64) {
	days = budgetDays(days)
	dayStart, dayEnd := keypool.CalendarDay(now, days.hour, days.zone)
	monthStart, monthEnd := keypool.CalendarMonth(now, days.hour, days.zone)
	for _, c := range k.costs {
		in := func(start, end time.Time) bool { return !c.at.Before(start) && c.at.Before(end) }
		switch {
		case in(dayStart, dayEnd) && c.held:
			dayHeld += c.amount
		case in(dayStart, dayEnd):
			day += c.amount
		}
		switch {
		case in(monthStart, monthEnd) && c.held:
			monthHeld += c.amount
		case in(monthStart, monthEnd):
			month += c.amount
		}
	}
	return day, dayHeld, month, monthHeld
}

// budgetRoom reports whether a cost fits what is left of budget (a zero
// field: no cap) at now. When it does not, it returns when it could: the
// end of the period that is spent (spent), or, when only what requests in
// flight reserve fills it, keypool.ReservedRetry from now.
func (k *key) budgetRoom(now time.Time, amount int64, budget keypool.Budget, days calendar) (ok bool, retryAt time.Time, spent bool) {
	if budget == (keypool.Budget{}) {
		return true, time.Time{}, false
	}
	d := budgetDays(days)
	_, dayEnd := keypool.CalendarDay(now, d.hour, d.zone)
	_, monthEnd := keypool.CalendarMonth(now, d.hour, d.zone)
	day, dayHeld, month, monthHeld := k.spent(now, days)
	ok = true
	for _, p := range []struct {
		spent, held, cap int64
		end              time.Time
	}{{day, dayHeld, micros(budget.PerDay), dayEnd}, {month, monthHeld, micros(budget.PerMonth), monthEnd}} {
		switch {
		case p.cap <= 0 || p.spent+p.held+amount <= p.cap:
		case p.spent+amount > p.cap:
			ok, spent, retryAt = false, true, maxTime(retryAt, p.end)
		case !spent:
			ok, retryAt = false, now.Add(keypool.ReservedRetry)
		}
	}
	return ok, retryAt, spent
}

// reserve holds what an admitted claim reserves of the key's budget: its
// cost, or, for an unbounded claim, all that is left.
func (k *key) reserve(now time.Time, c keypool.Claim, budget keypool.Budget) *held {
	amount := c.Cost
	if c.Unbounded {
		day, dayHeld, month, monthHeld := k.spent(now, k.days)
		left := int64(1 << 53)
		if cap := micros(budget.PerDay); cap > 0 {
			left = min(left, cap-day-dayHeld)
		}
		if cap := micros(budget.PerMonth); cap > 0 {
			left = min(left, cap-month-monthHeld)
		}
		amount = max(amount, left)
	}
	// Drop what no budget counts any more: costs before this month.
	start, _ := keypool.CalendarMonth(now, budgetDays(k.days).hour, budgetDays(k.days).zone)
	k.costs = slices.DeleteFunc(k.costs, func(c *cost) bool { return c.at.Before(start) })
	h := &held{k: k, cost: &cost{at: now, amount: amount, held: true}, resets: k.resets}
	k.costs = append(k.costs, h.cost)
	return h
}

// held is a reservation's cost in one key's spend.
type held struct {
	k      *key
	cost   *cost
	resets int // the key's resets when the cost was recorded
}

// spend makes amount what the request spent. After a ResetSpend the cost
// the key recorded is gone: the request's cost counts anew.
func (h *held) spend(amount int64) {
	if h == nil {
		return
	}
	if h.resets != h.k.resets {
		h.cost = &cost{at: h.cost.at}
		h.k.costs = append(h.k.costs, h.cost)
		h.resets = h.k.resets
	}
	h.cost.amount, h.cost.held = amount, false
}

// reservation is what a Take recorded for one request.
type reservation struct {
	s            *Store
	model, cap   *entry // its entries in the windows; nil where none
	own, account *held  // its costs in the key's and the account's spend
	tokens       int64
	released     bool
}

// Settle implements keypool.Reservation.
func (r *reservation) Settle(_ context.Context, tokens, amount int64) error {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if r.released {
		return nil
	}
	r.tokens = max(tokens, 0)
	for _, e := range []*entry{r.model, r.cap} {
		if e != nil {
			e.tokens = r.tokens
		}
	}
	r.own.spend(max(amount, 0))
	r.account.spend(max(amount, 0))
	return nil
}

// Release implements keypool.Reservation.
func (r *reservation) Release(context.Context) error {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if r.released {
		return nil
	}
	for _, e := range []*entry{r.model, r.cap} {
		if e != nil {
			e.requests, e.tokens = 0, 0
		}
	}
	r.own.spend(0)
	r.account.spend(0)
	r.released = true
	return nil
}

// Learn implements keypool.Store.
func (s *Store) Learn(_ context.Context, st keypool.Stated) error {
	if err := keypool.CheckModel(st.Model); err != nil {
		return fmt.Errorf("mapstore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.scope(st.Provider, st.KeyID, st.Account)
	now := k.clock(st.Now)
	days := calendar{st.DayZone, st.DayHour}
	k.days = days
	m := k.model(st.Model, now, false)
	m.learned = over(m.learned, st.Limits)

	// Each window counts at least what the vendor counted: the difference
	// counts as taken when it leaves the window at the vendor's reset, or
	// now, to leave a whole window on.
	u := usage(m.log, now, days)
	raise := func(minute bool, used keypool.Limits, reqs, toks int64, reset time.Time, span time.Duration) {
		req, tok := max(used.RPM-reqs, 0), max(used.TPM-toks, 0)
		if !minute {
			req, tok = max(used.RPD-reqs, 0), max(used.TPD-toks, 0)
		}
		if req == 0 && tok == 0 {
			return
		}
		at := now
		if !reset.IsZero() && (minute || days.zone == nil) {
			oldest := now.Add(-span + time.Millisecond) // the earliest time still in the window
			at = minTime(maxTime(reset.Add(-span), oldest), now)
		}
		e := &entry{at: at, requests: req, tokens: tok, minute: minute, day: !minute}
		m.log = append(m.log, e)
	}
	raise(true, st.Used, u.MinuteRequests, u.MinuteTokens, st.MinuteReset, time.Minute)
	raise(false, st.Used, u.DayRequests, u.DayTokens, st.DayReset, 24*time.Hour)
	return nil
}

// Bench implements keypool.Store.
func (s *Store) Bench(_ context.Context, b keypool.Bench) error {
	if err := keypool.CheckModel(b.Model); err != nil {
		return fmt.Errorf("mapstore: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.scope(b.Provider, b.KeyID, b.Account)
	if b.AllModels {
		k.bench.extend(b.Kind, b.Until)
		return nil
	}
	m := k.model(b.Model, k.last, false)
	m.bench.extend(b.Kind, b.Until)
	m.level = b.Level
	return nil
}

// extend sets the bench to kind until until, unless it lasts longer.
func (b *bench) extend(kind keypool.Kind, until time.Time) {
	if until.After(b.until) {
		*b = bench{kind, until}
	}
}

// Unbench implements keypool.Store.
func (s *Store) Unbench(_ context.Context, provider, keyID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.key(provider, keyID)
	k.bench, k.cap = bench{}, nil
	for _, m := range k.models {
		m.bench, m.level, m.learned, m.log = bench{}, 0, keypool.Limits{}, nil
	}
	return nil
}

// ResetSpend implements keypool.SpendResetter.
func (s *Store) ResetSpend(_ context.Context, provider, keyID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.key(provider, keyID)
	k.costs = nil
	k.resets++
	return nil
}

// State implements keypool.Store.
func (s *Store) State(_ context.Context, provider, keyID string, now time.Time) (keypool.KeyStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.key(provider, keyID)
	day, dayHeld, month, monthHeld := k.spent(now, k.days)
	st := keypool.KeyStats{
		Bench: k.bench.public(now),
		Cap:   usage(k.cap, now, k.days),
		Spent: keypool.Budget{PerDay: dollars(day + dayHeld), PerMonth: dollars(month + monthHeld)},
	}
	for name, m := range k.models {
		st.Models = append(st.Models, keypool.ModelStats{Model: name, Bench: m.bench.public(now),
			Level: m.level, Learned: m.learned, Usage: usage(m.log, now, k.days)})
	}
	if st.Models == nil {
		st.Models = []keypool.ModelStats{}
	}
	return st, nil
}

// public returns the bench in force at now; the zero Bench when none is.
func (b bench) public(now time.Time) keypool.Bench {
	if !b.until.After(now) {
		return keypool.Bench{}
	}
	return keypool.Bench{Kind: b.kind, Until: b.until.UTC()}
}

// Flush implements keypool.Store: the store keeps nothing elsewhere.
func (s *Store) Flush(context.Context) error { return nil }

// later returns the bench that lasts longer; a on a tie.
func later(a, b bench) bench {
	if b.until.After(a.until) {
		return b
	}
	return a
}

// least returns the tighter of two limits, where 0 is no limit.
func least(a, b int64) int64 {
	if a == 0 || b == 0 {
		return max(a, b)
	}
	return min(a, b)
}

func tighter(a, b keypool.Limits) keypool.Limits {
	return keypool.Limits{RPM: least(a.RPM, b.RPM), RPD: least(a.RPD, b.RPD), TPM: least(a.TPM, b.TPM), TPD: least(a.TPD, b.TPD)}
}

// over returns l with each limit o states (non-zero) in its place.
func over(l, o keypool.Limits) keypool.Limits {
	pick := func(old, stated int64) int64 {
		if stated != 0 {
			return stated
		}
		return old
	}
	return keypool.Limits{RPM: pick(l.RPM, o.RPM), RPD: pick(l.RPD, o.RPD), TPM: pick(l.TPM, o.TPM), TPD: pick(l.TPD, o.TPD)}
}

func tokenCap(l keypool.Limits) int64 { return least(l.TPM, l.TPD) }

// micros returns dollars in millionths of a dollar, rounded down.
func micros(usd float64) int64 { return int64(math.Floor(usd * 1e6)) }

// dollars returns millionths of a dollar in dollars.
func dollars(m int64) float64 { return float64(m) / 1e6 }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
