package keypool

import (
	"context"
	"time"
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
// The package's stores are the MemoryStore (the default), the BadgerStore
// (state that survives restarts) and, in package redisstore, a store that
// replicas share.
type Store interface {
	// Take admits one request for a key and model if no bench holds the key
	// and its windows have room, and records it; otherwise it records
	// nothing and says when the key could take the request.
	Take(ctx context.Context, t Take) (Grant, error)
	// Settle replaces the tokens a granted Take recorded by the tokens the
	// request actually used.
	Settle(ctx context.Context, t Take, g Grant, tokens int64) error
	// Release gives back all that a granted Take recorded: the request
	// never reached the vendor.
	Release(ctx context.Context, t Take, g Grant) error
	// Bench sets a key — for one model, or for all — aside until b.Until. A
	// bench never shortens one already set. It records b.Level as the key's
	// escalation level for the model.
	Bench(ctx context.Context, b Bench) error
	// ResetLevel sets a key's escalation level for a model back to zero, as
	// a success does.
	ResetLevel(ctx context.Context, provider, keyID, model string) error
	// Unbench lifts every bench of a key and resets its escalation levels.
	Unbench(ctx context.Context, provider, keyID string) error
	// State returns what the store holds for a key at now.
	State(ctx context.Context, provider, keyID string, now time.Time) (KeyState, error)
	// Flush writes what the store holds only in memory to where it keeps
	// state; a store that keeps nothing elsewhere returns nil.
	Flush(ctx context.Context) error
}

// Take is one request a pool asks a store to admit.
type Take struct {
	Provider string // the pool's provider name: several pools may share a store
	KeyID    string
	Model    string
	// Tokens is the request's token estimate, never above the smallest token
	// limit that applies.
	Tokens int64
	// Limits are the key's limits for the model; Cap its limits across all
	// its models. A zero field is no limit.
	Limits Limits
	Cap    Limits
	// Days says how day windows count.
	Days Calendar
	// Now is the pool's clock. A store that shares state between hosts may
	// use its own clock instead.
	Now time.Time
}

// Grant is a store's answer to a Take.
type Grant struct {
	// OK reports that the request was admitted and recorded.
	OK bool
	// RetryAt, when the request was refused, is the soonest moment the key
	// could take it.
	RetryAt time.Time
	// Reason, when the request was refused, is why: the kind of the bench
	// that holds the key, or KindRate for a full minute window and KindQuota
	// for a full day window.
	Reason Kind
	// Level is the key's escalation level for the model: the quota answers
	// without a date it has had since its last success.
	Level int
	// At is when the request was recorded, by the store's clock; Settle and
	// Release use it to find what it recorded.
	At time.Time

	// key and model are the MemoryStore's own state for the take, so that
	// settling it needs no lookup; other stores leave them nil.
	key   *memKey
	model *memModel
}

// Bench is a key set aside.
type Bench struct {
	Provider string
	KeyID    string
	Model    string
	// AllModels benches the key for every model: a revoked key or a spent
	// balance.
	AllModels bool
	Kind      Kind
	Until     time.Time
	// Level is the key's escalation level for Model after this bench.
	Level int
}

// KeyState is what a store holds for one key.
type KeyState struct {
	// Bench is the bench of the whole key; zero when none holds it.
	Bench BenchState
	// Cap is what the key has used across all its models.
	Cap Usage
	// Models holds the key's state per model, in no particular order.
	Models []ModelState
}

// ModelState is what a store holds for one key and model.
type ModelState struct {
	Model string
	Bench BenchState
	Level int
	Usage Usage
}

// BenchState is a bench: its kind and when it ends. The zero BenchState is
// no bench.
type BenchState struct {
	Kind  Kind
	Until time.Time
}
