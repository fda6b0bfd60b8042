package keypool

import (
	"context"
	"time"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// Store keeps a pool's state: what each key has taken in each window, and its
// benches. Secrets never reach a store: keys are named by their IDs.
//
// Every method takes a context and returns an error for a failure of the
// store itself; a request the windows refuse is a result (Grant.OK false),
// not an error. Take checks and records in one atomic step, so two
// goroutines — or two processes sharing a store — never both take the last
// slot. A Store must be safe for concurrent use.
//
// The package's stores are NewMemoryStore's (the default), the BadgerStore
// (state that survives restarts) and, in package redisstore, a store that
// replicas share. Package storetest holds the conformance suite each of
// them passes, and the parity check that holds a store to the MemoryStore's
// answers; a store outside this module keeps the conventions below (see
// AccountID) and passes both, as package examples/mapstore does.
type Store interface {
	// Take admits one request for a key and model if no bench holds the key
	// (or its account) and its windows have room, and records it; otherwise
	// it records nothing and says when the key could take the request.
	Take(ctx context.Context, c Claim) (Grant, error)
	// Learn records what a vendor's answer stated of the windows of a key
	// (or its account) for a model: the limits the vendor enforces, and how
	// much of them it has counted (see Stated).
	Learn(ctx context.Context, s Stated) error
	// Bench sets a key — for one model, or for all — aside until b.Until. A
	// bench never shortens one already set. For one model it also records
	// b.Level as the key's level for the model; a Bench with a zero Until
	// sets only the level, as a success does when it sets it back to zero.
	Bench(ctx context.Context, b Bench) error
	// Unbench lifts every bench of a key and sets its levels back to zero;
	// it also forgets what the key's windows count and the limits it
	// learned (Learn), so that nothing one answer set — a bench, a
	// vendor's statement that a day is spent, a settle of its usage —
	// outlives it.
	Unbench(ctx context.Context, provider, keyID string) error
	// State returns what the store holds for a key at now: its benches,
	// levels, usage, spend and learned limits. It fills Bench, Cap, Spent
	// and Models (each with Model, Bench, Level, Usage and Learned); the
	// pool fills the rest of KeyStats. An account's state is asked for under the ID
	// AccountID(account).
	State(ctx context.Context, provider, keyID string, now time.Time) (KeyStats, error)
	// Flush writes what the store holds only in memory to where it keeps
	// state; a store that keeps nothing elsewhere returns nil.
	Flush(ctx context.Context) error
}

// SpendResetter is implemented by a Store that can forget what a key (or an
// account, under AccountID) spent: the package's stores and redisstore's
// do, and Pool.ResetSpend asks for it.
type SpendResetter interface {
	// ResetSpend forgets what the key spent today and this month, and
	// what its requests in flight reserve: a reservation taken before
	// holds nothing once it settles, and its cost counts as spent.
	ResetSpend(ctx context.Context, provider, keyID string) error
}

// AffinityStore is implemented by a Store that keeps, for the replicas of a
// pool that share it, which key each conversation stays on (see
// WithAffinity): redisstore's does. A conversation is named by a short
// hash, never by what the request said.
type AffinityStore interface {
	// Affinity returns the ID of the key conversation stays on, "" when
	// none does, and keeps it for idle more.
	Affinity(ctx context.Context, provider, conversation string, idle time.Duration) (keyID string, err error)
	// SetAffinity records that conversation stays on keyID, for idle.
	SetAffinity(ctx context.Context, provider, conversation, keyID string, idle time.Duration) error
}

// Disabled says who took a key out of rotation (Pool.Disable), and when.
type Disabled struct {
	By string
	At time.Time
}

// DisabledStore is implemented by a Store that keeps which keys an
// operator took out of rotation (Pool.Disable), so that they stay out
// across restarts and, in a store replicas share, on every replica: the
// package's stores and redisstore's do. A pool over a store without it
// keeps them out only while it lives.
type DisabledStore interface {
	// SetDisabled records that the key is out of rotation, as d says, in
	// place of what was recorded before; a nil d puts it back. A store
	// may keep d.At to the millisecond.
	SetDisabled(ctx context.Context, provider, keyID string, d *Disabled) error
	// Disabled returns the keys of provider out of rotation, by ID.
	Disabled(ctx context.Context, provider string) (map[string]Disabled, error)
}

// HealthReporter is implemented by a Store that can fail between calls —
// one that writes behind, or one whose server stops answering — and says
// so: the BadgerStore and redisstore's Store do. A pool whose store has a
// Health method reads it after every store call and tells OnStoreError
// when it starts and stops failing; the keypool command shows it on
// /healthz and /status.
type HealthReporter interface {
	// Health returns nil while the store works, and otherwise why it does
	// not. It is read on every request, so it must be cheap (an atomic
	// load, a short lock) and never wait on a disk or the network; a
	// store that fails only within calls, which return the error, needs
	// none.
	Health() error
}

// HealthNotifier is implemented by a HealthReporter that tells of each
// change of its health as it happens — a failure that starts, a failure
// that ends — so that no one need poll it: the BadgerStore and
// redisstore's Store do. A pool over one tells OnStoreError of a change
// even while no request comes.
type HealthNotifier interface {
	HealthReporter
	// NotifyHealth calls f, from a goroutine of the store's, each time
	// Health starts or stops returning an error, until remove is called.
	// f must return quickly; it reads Health for the news.
	NotifyHealth(f func()) (remove func())
}

// The conventions every store keeps, so that a pool gets the same answers
// from each: a store outside this module needs no more than these, and
// storetest.Run and storetest.Parity hold it to them.
//
// Accounts. Keys that name one account share its windows, and its rate and
// quota benches, as vendors scope limits to an organisation or a project: a
// store keeps an account's state as it keeps a key's, under AccountID of its
// name, an ID no key's ID can be, and State answers for it under that ID. A
// key's own benches — a revoked key — stay with the key.
//
// Models. A store refuses, with an error, a model name CheckModel refuses,
// and keeps at most MaxModelsPerKey models for one key (or account): a new
// model takes the place of one that holds nothing in force (no bench, no
// level, windows that count nothing), or, when none does, shares one entry
// with the other models beyond the bound, named OverflowModel in State — but
// a model the pool was configured for (Claim.Named) always has an entry of
// its own.
//
// Windows. A minute window (RPM, TPM) slides over the last minute; a day
// window (RPD, TPD) over the last 24 hours, or, when a Claim's DayZone is
// set, counts the calendar day CalendarDay returns. A take is counted only
// in the windows its limits set: the model's, by Claim.Limits tightened by
// what was learned, and the key's across models, by Claim.Cap. A sliding
// window whose request limit is no more than 81 a minute or 25 a day counts
// each request from its time, rounded up to the millisecond, for its span
// and ExactGuard more, and when it is full says the request fits when
// enough of the oldest have left; the package's stores count others in 81 buckets of 750 ms or
// 25 of an hour, each counted until all of it has left the span, which
// admits at least 98.7% (96% for a day) of the limit.
//
// Budgets. Spend counts by the calendar days and months of the Claim's
// DayZone and DayHour (CalendarDay, CalendarMonth), or of midnight UTC when
// days slide. A claim refused only for what requests in flight reserve is
// told to retry ReservedRetry later; one refused for what was spent, when
// the day or month ends.

// AccountID returns the ID under which a store keeps the state of an
// account, and under which State answers for it: a NUL, then the account's
// name. Key IDs hold no control characters, so no key's ID is an account's.
func AccountID(account string) string { return windowspec.AccountID(account) }

// accountID is AccountID.
func accountID(account string) string { return windowspec.AccountID(account) }

// CheckModel returns an error saying why a store cannot keep a model name:
// longer than 256 bytes, not UTF-8, or holding a control character. The
// error never quotes the name.
func CheckModel(name string) error { return windowspec.CheckModel(name) }

// MaxModelsPerKey bounds the models a store keeps for one key; OverflowModel
// names the entry the models beyond it share.
const (
	MaxModelsPerKey = windowspec.MaxModelsPerKey
	OverflowModel   = windowspec.OverflowModel
)

// ExactGuard is how much longer than its span a window that counts exact
// times counts a request: the vendor counts a request when it arrives, a
// moment after the take, and a client on a fixed period would otherwise
// meet the vendor's window that moment early.
const ExactGuard = windowspec.ExactGuard

// ReservedRetry is how soon a claim refused because what requests in flight
// reserve fills a budget is told to try again (Grant.RetryAt, with
// KindRate): they settle as their answers end.
const ReservedRetry = windowspec.ReservedRetry

// CalendarDay returns the calendar day that holds now: it starts at hour
// o'clock in zone and ends at the same hour the next day (23 or 25 hours
// later across a change of daylight saving time).
func CalendarDay(now time.Time, hour int, zone *time.Location) (start, end time.Time) {
	return windowspec.CalendarDay(now, hour, zone)
}

// CalendarMonth returns the calendar month that holds now: it starts on the
// first day at hour o'clock in zone and ends at the same hour on the first
// day of the next month.
func CalendarMonth(now time.Time, hour int, zone *time.Location) (start, end time.Time) {
	return windowspec.CalendarMonth(now, hour, zone)
}

// days returns the calendar a Claim's or a Stated's day fields describe.
func days(zone *time.Location, hour int) calendar { return calendar{hour: hour, loc: zone} }

// Claim is one request a pool asks a store to admit.
type Claim struct {
	Provider string // the pool's provider name: several pools may share a store
	KeyID    string
	// Account, when set, is the account the key belongs to: the request
	// counts in the account's windows, not the key's, and the account's
	// benches hold it as the key's do.
	Account string
	// Model is the request's model: at most 256 bytes of UTF-8 without
	// control characters (a store refuses others with an error).
	Model string
	// Named reports that the pool was configured for the model
	// (WithModelLimits): a store that bounds the models it keeps per key
	// keeps it whatever other models hold.
	Named bool
	// Tokens is the request's token estimate, never above the smallest token
	// limit that applies.
	Tokens int64
	// Limits are the key's (or its account's) configured limits for the
	// model; Cap its limits across all its models. A zero field is no limit.
	// A store enforces, axis by axis, the tighter of Limits and the limits
	// it learned for the model (Learn).
	Limits Limits
	Cap    Limits
	// DayZone and DayHour say how day windows count: over the last 24
	// hours when DayZone is nil, else by calendar days that start at
	// DayHour o'clock in DayZone.
	DayZone *time.Location
	DayHour int
	// Cost is what the request reserves, in millionths of a US dollar:
	// what it can cost at most (see Budget). Budget caps what the key
	// spends, AccountBudget what its account spends (zero fields: no cap).
	// A store admits the request only when its cost fits what is left of
	// each cap, by calendar days and months, after what the requests in
	// flight reserve — checked and recorded in one atomic step — and
	// holds it as reserved until its Reservation settles (then it is
	// spent) or is released. A refusal by what was spent is KindQuota,
	// retried when the period ends; one by what requests in flight
	// reserve, with what was spent alone leaving room, is KindRate,
	// retried a second later.
	Cost          int64
	Budget        Budget
	AccountBudget Budget
	// Unbounded reports that nothing bounds the request's output (no
	// max_tokens, no Price.MaxOutput): Cost is then its estimate, which
	// what is left must hold, and a store that admits it reserves all that
	// is left of each cap of the key and of its account, so that no other
	// request runs beside it.
	Unbounded bool
	// Now is the pool's clock. A store that shares state between hosts may
	// use its own clock instead.
	Now time.Time
}

// Grant is a store's answer to a Claim.
type Grant struct {
	// OK reports that the request was admitted and recorded.
	OK bool
	// RetryAt, when the request was refused, is the soonest moment the key
	// could take it.
	RetryAt time.Time
	// Reason, when the request was refused, is why: the kind of the bench
	// that holds the key, or KindRate for a full minute window and KindQuota
	// for a full day window or a spent budget.
	Reason Kind
	// Level is the key's level for the model: the quota answers without a
	// date it has had since its last success.
	Level int
	// Reservation is what an admitted request recorded, held by the store
	// that made it; nil when the request was refused.
	Reservation Reservation
}

// Reservation is what a store recorded for one admitted request, as
// rate.Reservation is for x/time/rate. The pool settles or releases it once
// the answer is known; one request uses it at a time.
type Reservation interface {
	// Settle replaces the tokens and the cost (in millionths of a dollar)
	// the request recorded by those it used: what it reserved of a budget
	// is no longer held, and the cost is spent. A later Settle replaces
	// those in turn.
	Settle(ctx context.Context, tokens, cost int64) error
	// Release gives back all the request recorded: it never reached the
	// vendor. A second Release does nothing.
	Release(ctx context.Context) error
}

// Bench is a key set aside: what a pool asks a store to record, and, in
// KeyStats, a bench in force (its Kind and Until; the zero Bench is none).
type Bench struct {
	Provider string
	KeyID    string
	// Account, when set, benches the account rather than the key: every
	// key of the account is held (a spent window the keys share).
	Account string
	Model   string
	// AllModels benches the key for every model: a revoked key or a spent
	// balance.
	AllModels bool
	Kind      Kind
	Until     time.Time
	// Level is the key's level for Model after this bench: how many quota
	// answers without a date it has had since its last success.
	Level int
}

// Stated is what a vendor's answer stated of the windows of a key (or its
// account) for a model.
type Stated struct {
	Provider string
	KeyID    string
	Account  string
	Model    string
	// Limits are the limits the vendor stated, axis by axis; a zero field is
	// one it did not state. The store keeps each stated limit in place of
	// the one it learned before, and enforces the tighter of it and a
	// Claim's Limits.
	Limits Limits
	// Used is how much of each window the vendor has counted (its limit less
	// what remains); a negative field is one it did not state. A window that
	// counts less is raised to it: the difference counts as taken, so that
	// it leaves the window at the vendor's reset of that window —
	// MinuteReset for RPM and TPM, DayReset for RPD and TPD — or, when that
	// is zero, a whole window from Now. A vendor's remaining 0 thus holds the
	// window until the vendor's reset, or until the store's own window
	// frees a slot, whichever the evidence supports.
	Used        Limits
	MinuteReset time.Time
	DayReset    time.Time
	// DayZone and DayHour say how day windows count, as a Claim's do; Now is
	// the pool's clock.
	DayZone *time.Location
	DayHour int
	Now     time.Time
}
