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
// replicas share. Package storetest holds the conformance suite each of
// them passes.
type Store interface {
	// Take admits one request for a key and model if no bench holds the key
	// and its windows have room, and records it; otherwise it records
	// nothing and says when the key could take the request.
	Take(ctx context.Context, c Claim) (Grant, error)
	// Bench sets a key — for one model, or for all — aside until b.Until. A
	// bench never shortens one already set. For one model it also records
	// b.Level as the key's level for the model; a Bench with a zero Until
	// sets only the level, as a success does when it sets it back to zero.
	Bench(ctx context.Context, b Bench) error
	// Unbench lifts every bench of a key and sets its levels back to zero.
	Unbench(ctx context.Context, provider, keyID string) error
	// State returns what the store holds for a key at now: its benches,
	// levels and usage. It fills Bench, Cap and Models (each with Model,
	// Bench, Level and Usage); the pool fills the rest of KeyStats.
	State(ctx context.Context, provider, keyID string, now time.Time) (KeyStats, error)
	// Flush writes what the store holds only in memory to where it keeps
	// state; a store that keeps nothing elsewhere returns nil.
	Flush(ctx context.Context) error
}

// Claim is one request a pool asks a store to admit.
type Claim struct {
	Provider string // the pool's provider name: several pools may share a store
	KeyID    string
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

// Grant is a store's answer to a Claim.
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
	// Settle replaces the tokens the request recorded by the tokens it
	// used. A later Settle replaces those in turn.
	Settle(ctx context.Context, tokens int64) error
	// Release gives back all the request recorded: it never reached the
	// vendor. A second Release does nothing.
	Release(ctx context.Context) error
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
	// Level is the key's level for Model after this bench: how many quota
	// answers without a date it has had since its last success.
	Level int
}

// BenchState is a bench in force: its kind and when it ends. The zero
// BenchState is no bench.
type BenchState struct {
	Kind  Kind
	Until time.Time
}
