// Package storetest is the conformance suite every keypool.Store passes: the
// memory and Badger stores of package keypool, the Redis store of package
// redisstore, and any store a user writes. Run holds a store to the
// contract; Parity holds it to the MemoryStore's answers, step for step.
package storetest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

// Harness is what the suite needs of a store.
type Harness struct {
	// Open returns a new, empty store; it closes the store when the test
	// ends (t.Cleanup).
	Open func(t *testing.T) keypool.Store
	// Reopen closes s and returns a store over the same state, as a restart
	// does; nil for a store that keeps nothing past its life.
	Reopen func(t *testing.T, s keypool.Store) keypool.Store
	// Now returns the store's time; Advance moves it forward by d. A store
	// that reads the time from Take.Now gets Now; one with its own clock
	// (a server's) must move that clock in Advance.
	Now     func() time.Time
	Advance func(t *testing.T, d time.Duration)
	// RealTime reports that Advance sleeps: the suite then skips the cases
	// that need minutes to pass, and Parity does not run.
	RealTime bool
	// ExactTimes, for Parity, reports that the store counts every sliding
	// window by its requests' own times, never in buckets: Parity then
	// offers it only limits under which the MemoryStore does so too (see
	// keypool.Store's Windows), and no vendors' statements, which the
	// MemoryStore may count in buckets whatever the limit.
	ExactTimes bool
}

// Run runs the suite against the stores h makes.
func Run(t *testing.T, h Harness) {
	t.Helper()
	cases := []struct {
		name string
		run  func(t *testing.T, h Harness)
		long bool // needs minutes to pass
	}{
		{"TakeRefusesWhenTheMinuteIsFull", takeRefusesWhenFull, false},
		{"DayWindowRefusesAsQuota", dayWindowRefusesAsQuota, false},
		{"WindowFreesAfterItsSpan", windowFreesAfterSpan, true},
		{"SettleAndRelease", settleAndRelease, false},
		{"TakeIsAtomic", takeIsAtomic, false},
		{"CapCountsEveryModel", capCountsEveryModel, false},
		{"BenchHoldsTheKeyForItsModel", benchHoldsModel, false},
		{"BenchOfAllModels", benchOfAllModels, false},
		{"BenchNeverShortens", benchNeverShortens, false},
		{"BenchEnds", benchEnds, false},
		{"Level", level, false},
		{"Unbench", unbench, false},
		{"UnbenchLiftsWhatAnswersSet", unbenchLiftsWhatAnswersSet, false},
		{"ResetSpend", resetSpend, false},
		{"DisabledKeys", disabledKeys, false},
		{"KeysAreSeparate", keysAreSeparate, false},
		{"Restart", restart, false},
		{"FullKeyKeepsNamedModels", fullKeyKeepsNamedModels, false},
		{"IdleModelsMakeRoom", idleModelsMakeRoom, true},
		{"RefusesModelNamesItCannotKeep", refusesBadModelNames, false},
		{"LearnedLimitsAreEnforced", learnedLimitsAreEnforced, false},
		{"StatedUseHoldsTheWindowUntilItsReset", statedUseHoldsTheWindow, false},
		{"StatedUseWithoutAResetHoldsAWholeWindow", statedUseWithoutReset, true},
		{"AccountsShareWindowsAndBenches", accountsShareWindowsAndBenches, false},
		{"RestartKeepsLearnedLimits", restartKeepsLearned, false},
		{"BudgetsHoldSpend", budgetsHoldSpend, false},
		{"AccountBudgetsAreShared", accountBudgetsAreShared, false},
		{"ReservationsHoldTheBudget", reservationsHoldTheBudget, false},
		{"UnboundedTakesAllThatIsLeft", unboundedTakesAllThatIsLeft, false},
		{"SettleThatChangesNothingButTheCostFreesTheReserve", settleAtNoCostFreesTheReserve, false},
		{"BudgetsReturnWithTheNextDay", budgetsReturnWithTheNextDay, true},
		{"RestartKeepsSpend", restartKeepsSpend, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.long && h.RealTime {
				t.Skip("needs minutes of real time")
			}
			c.run(t, h)
		})
	}
}

var ctx = context.Background()

// take builds a take of key k for model m at the store's time.
func take(h Harness, k, m string, lim keypool.Limits, tokens int64) keypool.Claim {
	return keypool.Claim{Provider: "suite", KeyID: k, Model: m, Limits: lim, Tokens: tokens, Now: h.Now()}
}

func mustTake(t *testing.T, s keypool.Store, tk keypool.Claim) keypool.Grant {
	t.Helper()
	g, err := s.Take(ctx, tk)
	require.NoError(t, err)
	return g
}

func usage(t *testing.T, s keypool.Store, h Harness, key, model string) keypool.Usage {
	t.Helper()
	return modelStats(t, s, h, key, model).Usage
}

// modelStats returns what the store holds of a key for a model; the zero
// ModelStats when it holds nothing.
func modelStats(t *testing.T, s keypool.Store, h Harness, key, model string) keypool.ModelStats {
	t.Helper()
	st, err := s.State(ctx, "suite", key, h.Now())
	require.NoError(t, err)
	for _, m := range st.Models {
		if m.Model == model {
			return m
		}
	}
	return keypool.ModelStats{}
}

func modelState(t *testing.T, s keypool.Store, h Harness, key, model string) keypool.ModelStats {
	t.Helper()
	st, err := s.State(ctx, "suite", key, h.Now())
	require.NoError(t, err)
	for _, m := range st.Models {
		if m.Model == model {
			return m
		}
	}
	return keypool.ModelStats{}
}

func takeRefusesWhenFull(t *testing.T, h Harness) {
	s := h.Open(t)
	lim := keypool.Limits{RPM: 3}
	for i := range 3 {
		g := mustTake(t, s, take(h, "k", "m", lim, 0))
		require.True(t, g.OK, "take %d", i+1)
	}
	g := mustTake(t, s, take(h, "k", "m", lim, 0))
	assert.False(t, g.OK, "the fourth take in a minute of RPM 3")
	assert.Equal(t, keypool.KindRate, g.Reason)
	wait := g.RetryAt.Sub(h.Now())
	assert.True(t, wait > 0 && wait <= 62*time.Second, "RetryAt %v away, want within a minute and a bucket", wait)
	assert.Equal(t, int64(3), usage(t, s, h, "k", "m").MinuteRequests)
}

func dayWindowRefusesAsQuota(t *testing.T, h Harness) {
	s := h.Open(t)
	lim := keypool.Limits{RPD: 2}
	require.True(t, mustTake(t, s, take(h, "k", "m", lim, 0)).OK)
	require.True(t, mustTake(t, s, take(h, "k", "m", lim, 0)).OK)
	g := mustTake(t, s, take(h, "k", "m", lim, 0))
	assert.False(t, g.OK)
	assert.Equal(t, keypool.KindQuota, g.Reason)
	wait := g.RetryAt.Sub(h.Now())
	assert.True(t, wait > 23*time.Hour && wait <= 25*time.Hour, "RetryAt %v away, want about a day", wait)
}

func windowFreesAfterSpan(t *testing.T, h Harness) {
	s := h.Open(t)
	lim := keypool.Limits{RPM: 1}
	require.True(t, mustTake(t, s, take(h, "k", "m", lim, 0)).OK)
	g := mustTake(t, s, take(h, "k", "m", lim, 0))
	require.False(t, g.OK)
	h.Advance(t, g.RetryAt.Sub(h.Now()))
	assert.True(t, mustTake(t, s, take(h, "k", "m", lim, 0)).OK, "a take at RetryAt goes through")
}

func settleAndRelease(t *testing.T, h Harness) {
	s := h.Open(t)
	lim := keypool.Limits{TPM: 100}
	first := take(h, "k", "m", lim, 60)
	g1 := mustTake(t, s, first)
	require.True(t, g1.OK)
	require.False(t, mustTake(t, s, take(h, "k", "m", lim, 50)).OK, "60 + 50 > 100")
	require.NoError(t, g1.Reservation.Settle(ctx, 10, 0))
	assert.Equal(t, int64(10), usage(t, s, h, "k", "m").MinuteTokens)
	require.NoError(t, g1.Reservation.Settle(ctx, 20, 0))
	assert.Equal(t, int64(20), usage(t, s, h, "k", "m").MinuteTokens, "a second settle replaces the first")
	require.NoError(t, g1.Reservation.Settle(ctx, 10, 0))
	second := take(h, "k", "m", lim, 50)
	g2 := mustTake(t, s, second)
	require.True(t, g2.OK, "10 + 50 <= 100 after settling")
	require.NoError(t, g2.Reservation.Release(ctx))
	require.NoError(t, g2.Reservation.Release(ctx))
	u := usage(t, s, h, "k", "m")
	assert.Equal(t, keypool.Usage{MinuteRequests: 1, MinuteTokens: 10}, u, "a released take leaves nothing, however often released")
	refused := mustTake(t, s, take(h, "k", "m", keypool.Limits{TPM: 100}, 100))
	require.False(t, refused.OK)
	assert.Nil(t, refused.Reservation, "a refusal reserves nothing")
}

func takeIsAtomic(t *testing.T, h Harness) {
	s := h.Open(t)
	lim := keypool.Limits{RPM: 20, TPM: 1_000_000}
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			g, err := s.Take(ctx, take(h, "k", "m", lim, 5))
			assert.NoError(t, err)
			if g.OK {
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(20), ok.Load(), "takes admitted by RPM 20 from 100 at once")
}

func capCountsEveryModel(t *testing.T, h Harness) {
	s := h.Open(t)
	tk := func(model string) keypool.Claim {
		x := take(h, "k", model, keypool.Limits{}, 0)
		x.Cap = keypool.Limits{RPD: 3}
		return x
	}
	for _, m := range []string{"a", "b", "c"} {
		require.True(t, mustTake(t, s, tk(m)).OK, "model %s", m)
	}
	g := mustTake(t, s, tk("d"))
	assert.False(t, g.OK, "the key's cap across models is spent")
	assert.Equal(t, keypool.KindQuota, g.Reason)
	st, err := s.State(ctx, "suite", "k", h.Now())
	require.NoError(t, err)
	assert.Equal(t, int64(3), st.Cap.DayRequests)
}

func benchHoldsModel(t *testing.T, h Harness) {
	s := h.Open(t)
	until := h.Now().Add(time.Hour)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m", Kind: keypool.KindQuota, Until: until}))
	g := mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0))
	assert.False(t, g.OK)
	assert.Equal(t, keypool.KindQuota, g.Reason)
	assert.WithinDuration(t, until, g.RetryAt, h.slack())
	assert.True(t, mustTake(t, s, take(h, "k", "other", keypool.Limits{}, 0)).OK, "another model is free")
	ms := modelState(t, s, h, "k", "m")
	assert.Equal(t, keypool.KindQuota, ms.Bench.Kind)
	assert.WithinDuration(t, until, ms.Bench.Until, h.slack())
}

func benchOfAllModels(t *testing.T, h Harness) {
	s := h.Open(t)
	until := h.Now().Add(12 * time.Hour)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", AllModels: true, Kind: keypool.KindAuth, Until: until}))
	for _, m := range []string{"a", "b"} {
		g := mustTake(t, s, take(h, "k", m, keypool.Limits{}, 0))
		assert.False(t, g.OK, "model %s", m)
		assert.Equal(t, keypool.KindAuth, g.Reason)
	}
	st, err := s.State(ctx, "suite", "k", h.Now())
	require.NoError(t, err)
	assert.Equal(t, keypool.KindAuth, st.Bench.Kind)
}

func benchNeverShortens(t *testing.T, h Harness) {
	s := h.Open(t)
	long := h.Now().Add(time.Hour)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m", Kind: keypool.KindQuota, Until: long}))
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m", Kind: keypool.KindRate, Until: h.Now().Add(time.Second)}))
	g := mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0))
	assert.False(t, g.OK)
	assert.Equal(t, keypool.KindQuota, g.Reason, "the longer bench stands")
	assert.WithinDuration(t, long, g.RetryAt, h.slack())

	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k2", AllModels: true, Kind: keypool.KindAuth, Until: long}))
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k2", AllModels: true, Kind: keypool.KindRate, Until: h.Now().Add(time.Second)}))
	g = mustTake(t, s, take(h, "k2", "m", keypool.Limits{}, 0))
	assert.Equal(t, keypool.KindAuth, g.Reason, "the longer bench of all models stands")
	assert.WithinDuration(t, long, g.RetryAt, h.slack())
}

func benchEnds(t *testing.T, h Harness) {
	s := h.Open(t)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m", Kind: keypool.KindRate, Until: h.Now().Add(300 * time.Millisecond)}))
	require.False(t, mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0)).OK)
	h.Advance(t, 400*time.Millisecond)
	assert.True(t, mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0)).OK, "the bench has ended")
	assert.Zero(t, modelState(t, s, h, "k", "m").Bench, "no bench is reported after its end")
}

func level(t *testing.T, h Harness) {
	s := h.Open(t)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m", Kind: keypool.KindQuota,
		Until: h.Now().Add(200 * time.Millisecond), Level: 2}))
	h.Advance(t, 400*time.Millisecond)
	g := mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0))
	require.True(t, g.OK)
	assert.Equal(t, 2, g.Level, "the level outlives the bench")
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m"}))
	g = mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0))
	assert.True(t, g.OK, "a bench with no end sets only the level")
	assert.Equal(t, 0, g.Level, "a success sets the level back to zero")
}

func unbench(t *testing.T, h Harness) {
	s := h.Open(t)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", AllModels: true, Kind: keypool.KindAuth, Until: h.Now().Add(time.Hour)}))
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m", Kind: keypool.KindQuota, Until: h.Now().Add(time.Hour), Level: 3}))
	require.NoError(t, s.Unbench(ctx, "suite", "k"))
	g := mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0))
	assert.True(t, g.OK)
	assert.Equal(t, 0, g.Level)
}

// unbenchLiftsWhatAnswersSet holds Unbench to lifting all that one answer
// can set beside a bench: a vendor's statement that the day is spent, with
// the day limit it stated, and the settle of a usage that fills the day's
// tokens.
func unbenchLiftsWhatAnswersSet(t *testing.T, h Harness) {
	s := h.Open(t)
	lim := keypool.Limits{RPD: 100, TPD: 1000}
	require.NoError(t, s.Learn(ctx, learn(h, "k", "", "m", keypool.Limits{RPD: 5}, keypool.Limits{RPM: -1, TPM: -1, RPD: 5, TPD: -1}, time.Time{})))
	g := mustTake(t, s, take(h, "k", "m", lim, 10))
	require.False(t, g.OK, "the vendor said the day's 5 requests are spent")
	assert.Equal(t, keypool.KindQuota, g.Reason)
	require.NoError(t, s.Unbench(ctx, "suite", "k"))
	assert.Equal(t, keypool.Limits{}, learned(t, s, h, "k", "m"), "the stated limit is forgotten")
	g = mustTake(t, s, take(h, "k", "m", lim, 10))
	require.True(t, g.OK, "the stated day is lifted")
	require.NoError(t, g.Reservation.Settle(ctx, 1_000_000, 0))
	assert.False(t, mustTake(t, s, take(h, "k", "m", lim, 10)).OK, "an answer's usage filled the day's tokens")
	require.NoError(t, s.Unbench(ctx, "suite", "k"))
	assert.True(t, mustTake(t, s, take(h, "k", "m", lim, 10)).OK, "and Unbench lifts it")

	require.NoError(t, s.Learn(ctx, learn(h, "k2", "org", "m", keypool.Limits{}, keypool.Limits{RPM: -1, TPM: -1, RPD: 100, TPD: -1}, time.Time{})))
	c := take(h, "k2", "m", lim, 10)
	c.Account = "org"
	require.False(t, mustTake(t, s, c).OK, "an account's day, stated spent")
	require.NoError(t, s.Unbench(ctx, "suite", keypool.AccountID("org")))
	assert.True(t, mustTake(t, s, c).OK, "is lifted under the account's ID")
}

// resetSpend holds a store that can reset spend (keypool.SpendResetter)
// to forgetting what was spent and what is reserved, with a reservation
// taken before the reset giving back nothing it held once it settles.
func resetSpend(t *testing.T, h Harness) {
	s := h.Open(t)
	r, ok := s.(keypool.SpendResetter)
	if !ok {
		t.Skip("the store cannot reset spend")
	}
	day := keypool.Budget{PerDay: 0.05}
	spendOf(t, s, h, "k", 30_000, day)
	inFlight := mustTake(t, s, priced(h, "k", 20_000, day))
	require.True(t, inFlight.OK)
	require.False(t, mustTake(t, s, priced(h, "k", 1, day)).OK)
	require.NoError(t, r.ResetSpend(ctx, "suite", "k"))
	assert.Zero(t, spent(t, s, h, "k").PerDay, "nothing spent, nothing reserved")
	after := mustTake(t, s, priced(h, "k", 40_000, day))
	require.True(t, after.OK, "the whole budget has room again")
	require.NoError(t, inFlight.Reservation.Settle(ctx, 10, 5_000))
	assert.InDelta(t, 0.045, spent(t, s, h, "k").PerDay, 1e-9,
		"the request in flight before the reset spends what it cost and takes nothing from what came after it")
	assert.False(t, mustTake(t, s, priced(h, "k", 10_000, day)).OK, "40,000 reserved and 5,000 spent leave 5,000")
	require.NoError(t, r.ResetSpend(ctx, "suite", "never-spent"), "a key that spent nothing")
}

// disabledKeys holds a store that keeps keys out of rotation
// (keypool.DisabledStore) to keeping each key's record apart by provider,
// replacing it, forgetting it, and keeping it across a restart.
func disabledKeys(t *testing.T, h Harness) {
	s := h.Open(t)
	if _, ok := s.(keypool.DisabledStore); !ok {
		t.Skip("the store keeps no disabled keys")
	}
	read := func(provider string) map[string]keypool.Disabled {
		t.Helper()
		got, err := s.(keypool.DisabledStore).Disabled(ctx, provider)
		require.NoError(t, err)
		return got
	}
	set := func(provider, key string, d *keypool.Disabled) {
		t.Helper()
		require.NoError(t, s.(keypool.DisabledStore).SetDisabled(ctx, provider, key, d))
	}
	assert.Empty(t, read("suite"), "a new store")
	at := h.Now().UTC().Truncate(time.Millisecond)
	odd := "k:{1}% é" // bytes a store's layout may use
	set("suite", "k", &keypool.Disabled{By: "operator_tokens[0]", At: at})
	set("suite", odd, &keypool.Disabled{By: "ops — night shift", At: at.Add(time.Second)})
	set("other", "k", &keypool.Disabled{By: "another pool", At: at})
	got := read("suite")
	require.Len(t, got, 2)
	assert.Equal(t, "operator_tokens[0]", got["k"].By)
	assert.True(t, got["k"].At.Equal(at), "At is kept to the millisecond: %v, want %v", got["k"].At, at)
	assert.Equal(t, "ops — night shift", got[odd].By)
	set("suite", "k", &keypool.Disabled{By: "operator_tokens[1]", At: at.Add(time.Minute)})
	assert.Equal(t, "operator_tokens[1]", read("suite")["k"].By, "a second record replaces the first")
	set("suite", "k", nil)
	set("suite", "never-disabled", nil)
	got = read("suite")
	assert.NotContains(t, got, "k", "put back")
	assert.Contains(t, got, odd)
	assert.Len(t, read("other"), 1, "another provider's keys are its own")
	if h.Reopen == nil {
		return
	}
	s = h.Reopen(t, s)
	got = read("suite")
	assert.Len(t, got, 1, "after a restart")
	assert.Equal(t, "ops — night shift", got[odd].By)
	assert.True(t, got[odd].At.Equal(at.Add(time.Second)))
}

func keysAreSeparate(t *testing.T, h Harness) {
	s := h.Open(t)
	lim := keypool.Limits{RPM: 1}
	require.True(t, mustTake(t, s, take(h, "k1", "m", lim, 0)).OK)
	assert.True(t, mustTake(t, s, take(h, "k2", "m", lim, 0)).OK, "another key")
	other := take(h, "k1", "m", lim, 0)
	other.Provider = "another-pool"
	assert.True(t, mustTake(t, s, other).OK, "the same key ID in another pool")
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k2", AllModels: true, Kind: keypool.KindAuth, Until: h.Now().Add(time.Hour)}))
	assert.False(t, mustTake(t, s, take(h, "k2", "x", keypool.Limits{}, 0)).OK)
	assert.True(t, mustTake(t, s, take(h, "k1", "x", keypool.Limits{}, 0)).OK)
}

func restart(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("the store keeps nothing past its life")
	}
	s := h.Open(t)
	lim := keypool.Limits{RPM: 10, TPD: 1000}
	for range 4 {
		require.True(t, mustTake(t, s, take(h, "k", "m", lim, 100)).OK)
	}
	until := h.Now().Add(3 * time.Hour)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "q", Kind: keypool.KindQuota, Until: until, Level: 1}))
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "revoked", AllModels: true, Kind: keypool.KindAuth, Until: until}))

	s = h.Reopen(t, s)
	u := usage(t, s, h, "k", "m")
	assert.Equal(t, int64(4), u.MinuteRequests, "minute requests after a restart")
	assert.Equal(t, int64(400), u.DayTokens, "day tokens after a restart")
	ms := modelState(t, s, h, "k", "q")
	assert.Equal(t, keypool.KindQuota, ms.Bench.Kind, "bench after a restart")
	assert.WithinDuration(t, until, ms.Bench.Until, h.slack())
	assert.Equal(t, 1, ms.Level)
	g := mustTake(t, s, take(h, "revoked", "m", keypool.Limits{}, 0))
	assert.False(t, g.OK)
	assert.Equal(t, keypool.KindAuth, g.Reason)
	for range 6 {
		require.True(t, mustTake(t, s, take(h, "k", "m", lim, 100)).OK)
	}
	assert.False(t, mustTake(t, s, take(h, "k", "m", lim, 100)).OK, "the window kept counting across the restart")
}

// maxModels is the bound on the models a store keeps for one key.
const maxModels = keypool.MaxModelsPerKey

// fill takes one request for each of maxModels models of key k, so that
// every entry holds a take for a minute.
func fill(t *testing.T, s keypool.Store, h Harness, k string) {
	t.Helper()
	for i := range maxModels {
		require.True(t, mustTake(t, s, take(h, k, fmt.Sprintf("m%d", i), keypool.Limits{RPM: 100}, 0)).OK)
	}
}

func hasModel(t *testing.T, s keypool.Store, h Harness, key, model string) bool {
	t.Helper()
	st, err := s.State(ctx, "suite", key, h.Now())
	require.NoError(t, err)
	for _, m := range st.Models {
		if m.Model == model {
			return true
		}
	}
	return false
}

func fullKeyKeepsNamedModels(t *testing.T, h Harness) {
	s := h.Open(t)
	fill(t, s, h, "k")
	crowded := take(h, "k", "crowded", keypool.Limits{RPM: 100}, 0)
	require.True(t, mustTake(t, s, crowded).OK)
	assert.False(t, hasModel(t, s, h, "k", "crowded"), "a full key shares one entry among new models")
	named := take(h, "k", "configured", keypool.Limits{RPM: 1}, 0)
	named.Named = true
	require.True(t, mustTake(t, s, named).OK)
	assert.True(t, hasModel(t, s, h, "k", "configured"), "a named model always has its own entry")
	assert.False(t, mustTake(t, s, named).OK, "with windows of its own: RPM 1")
}

func idleModelsMakeRoom(t *testing.T, h Harness) {
	s := h.Open(t)
	fill(t, s, h, "k")
	h.Advance(t, 2*time.Minute) // every entry's minute has passed
	for _, m := range []string{"new-a", "new-b"} {
		require.True(t, mustTake(t, s, take(h, "k", m, keypool.Limits{RPM: 100}, 0)).OK)
		assert.True(t, hasModel(t, s, h, "k", m), "%s takes the place of an idle entry", m)
	}
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "new-a", Kind: keypool.KindRate, Until: h.Now().Add(time.Hour)}))
	assert.True(t, mustTake(t, s, take(h, "k", "new-b", keypool.Limits{RPM: 100}, 0)).OK, "a bench of one new model never holds another")
}

func refusesBadModelNames(t *testing.T, h Harness) {
	s := h.Open(t)
	for _, name := range []string{strings.Repeat("m", 257), "a\x00b", "\xff\xfe"} {
		_, err := s.Take(ctx, take(h, "k", name, keypool.Limits{}, 0))
		assert.Error(t, err, "a model name of %d bytes", len(name))
		assert.Error(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: name, Kind: keypool.KindRate, Until: h.Now().Add(time.Minute)}))
	}
	assert.True(t, mustTake(t, s, take(h, "k", strings.Repeat("m", 256), keypool.Limits{}, 0)).OK, "256 bytes is a name")
}

func learn(h Harness, key, account, model string, limits, used keypool.Limits, minuteReset time.Time) keypool.Stated {
	return keypool.Stated{Provider: "suite", KeyID: key, Account: account, Model: model,
		Limits: limits, Used: used, MinuteReset: minuteReset, Now: h.Now()}
}

// unknown is a Stated.Used that states no count.
var unknown = keypool.Limits{RPM: -1, RPD: -1, TPM: -1, TPD: -1}

func learned(t *testing.T, s keypool.Store, h Harness, key, model string) keypool.Limits {
	t.Helper()
	return modelStats(t, s, h, key, model).Learned
}

func admitted(t *testing.T, s keypool.Store, c keypool.Claim, n int) int {
	t.Helper()
	ok := 0
	for range n {
		if mustTake(t, s, c).OK {
			ok++
		}
	}
	return ok
}

func learnedLimitsAreEnforced(t *testing.T, h Harness) {
	s := h.Open(t)
	require.NoError(t, s.Learn(ctx, learn(h, "k", "", "m", keypool.Limits{RPM: 2}, unknown, time.Time{})))
	assert.Equal(t, keypool.Limits{RPM: 2}, learned(t, s, h, "k", "m"))
	assert.Equal(t, 2, admitted(t, s, take(h, "k", "m", keypool.Limits{RPM: 5}, 0), 4), "the learned RPM 2 is tighter than the configured 5")
	assert.Equal(t, 1, admitted(t, s, take(h, "k2", "m", keypool.Limits{RPM: 1}, 0), 3), "a configured limit holds")
	require.NoError(t, s.Learn(ctx, learn(h, "k2", "", "m", keypool.Limits{RPM: 50}, unknown, time.Time{})))
	assert.Equal(t, 0, admitted(t, s, take(h, "k2", "m", keypool.Limits{RPM: 1}, 0), 3), "a learned limit never raises a configured one")
	assert.Equal(t, 2, admitted(t, s, take(h, "k3", "m", keypool.Limits{}, 0), 2), "nothing configured: no limit")
	require.NoError(t, s.Learn(ctx, learn(h, "k3", "", "m", keypool.Limits{RPM: 3, TPM: 100}, keypool.Limits{RPM: 2, RPD: -1, TPM: 0, TPD: -1}, time.Time{})))
	assert.Equal(t, 1, admitted(t, s, take(h, "k3", "m", keypool.Limits{}, 0), 3), "nothing configured: the learned limit alone, with the two the vendor counted")
	require.NoError(t, s.Learn(ctx, learn(h, "k3", "", "m", keypool.Limits{RPM: 4}, unknown, time.Time{})))
	assert.Equal(t, keypool.Limits{RPM: 4, TPM: 100}, learned(t, s, h, "k3", "m"), "a limit follows the vendor's, and one not stated stays")
	assert.Equal(t, 1, admitted(t, s, take(h, "k3", "m", keypool.Limits{}, 0), 3))
	g := mustTake(t, s, take(h, "k4", "m", keypool.Limits{}, 500))
	require.NoError(t, s.Learn(ctx, learn(h, "k4", "", "m", keypool.Limits{TPM: 300}, unknown, time.Time{})))
	assert.True(t, g.OK)
	assert.True(t, mustTake(t, s, take(h, "k4", "m", keypool.Limits{}, 500)).OK, "an estimate above a learned token limit counts as the limit")
	assert.False(t, mustTake(t, s, take(h, "k4", "m", keypool.Limits{}, 1)).OK)
}

func statedUseHoldsTheWindow(t *testing.T, h Harness) {
	s := h.Open(t)
	reset := h.Now().Add(6 * time.Second)
	require.NoError(t, s.Learn(ctx, learn(h, "k", "", "m", keypool.Limits{RPM: 10}, keypool.Limits{RPM: 10, RPD: -1, TPM: -1, TPD: -1}, reset)))
	g := mustTake(t, s, take(h, "k", "m", keypool.Limits{RPM: 20}, 0))
	assert.False(t, g.OK, "remaining 0 holds whatever is configured")
	assert.Equal(t, keypool.KindRate, g.Reason)
	wait := g.RetryAt.Sub(h.Now())
	assert.True(t, wait >= 6*time.Second && wait <= 8*time.Second, "back at the vendor's reset, not a minute on: %v", wait)
	u := usage(t, s, h, "k", "m")
	assert.Equal(t, int64(10), u.MinuteRequests, "the window counts what the vendor counted")
	require.NoError(t, s.Learn(ctx, learn(h, "k", "", "m", keypool.Limits{RPM: 10}, keypool.Limits{RPM: 3, RPD: -1, TPM: -1, TPD: -1}, reset)))
	assert.Equal(t, int64(10), usage(t, s, h, "k", "m").MinuteRequests, "a vendor's lower count lowers nothing")
}

func statedUseWithoutReset(t *testing.T, h Harness) {
	s := h.Open(t)
	require.NoError(t, s.Learn(ctx, learn(h, "k", "", "m", keypool.Limits{RPM: 2}, keypool.Limits{RPM: 2, RPD: -1, TPM: -1, TPD: -1}, time.Time{})))
	g := mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0))
	require.False(t, g.OK)
	wait := g.RetryAt.Sub(h.Now())
	assert.True(t, wait > 59*time.Second && wait <= 62*time.Second, "a whole window: %v", wait)
	h.Advance(t, wait)
	assert.True(t, mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0)).OK)
}

func accountsShareWindowsAndBenches(t *testing.T, h Harness) {
	s := h.Open(t)
	of := func(key string) keypool.Claim {
		c := take(h, key, "m", keypool.Limits{RPM: 3}, 0)
		c.Account = "org"
		return c
	}
	assert.Equal(t, 2, admitted(t, s, of("k1"), 2))
	assert.Equal(t, 1, admitted(t, s, of("k2"), 2), "the account's RPM 3, whichever key")
	assert.Equal(t, 2, admitted(t, s, take(h, "k3", "m", keypool.Limits{RPM: 3}, 0), 2), "a key of no account is its own")

	other := func(key string) keypool.Claim { c := of(key); c.Model = "x"; return c }
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k1", Account: "org", Model: "x", Kind: keypool.KindQuota, Until: h.Now().Add(time.Hour)}))
	g := mustTake(t, s, other("k2"))
	assert.False(t, g.OK, "a quota bench of one key's account holds every key of it")
	assert.Equal(t, keypool.KindQuota, g.Reason)

	y := func(key string) keypool.Claim { c := of(key); c.Model = "y"; return c }
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k1", AllModels: true, Kind: keypool.KindAuth, Until: h.Now().Add(time.Hour)}))
	g = mustTake(t, s, y("k1"))
	assert.False(t, g.OK, "a revoked key is held")
	assert.Equal(t, keypool.KindAuth, g.Reason)
	assert.True(t, mustTake(t, s, y("k2")).OK, "and its account's other keys are not")

	require.NoError(t, s.Learn(ctx, learn(h, "k2", "org", "z", keypool.Limits{RPM: 1}, unknown, time.Time{})))
	z := func(key string) keypool.Claim { c := of(key); c.Model = "z"; return c }
	assert.True(t, mustTake(t, s, z("k2")).OK)
	assert.False(t, mustTake(t, s, z("k2")).OK, "a limit learned from one key of the account")
	st, err := s.State(ctx, "suite", keypool.AccountID("org"), h.Now())
	require.NoError(t, err)
	found := false
	for _, m := range st.Models {
		if m.Model == "z" {
			found = true
			assert.Equal(t, keypool.Limits{RPM: 1}, m.Learned)
		}
	}
	assert.True(t, found, "the account's state holds what it learned")
}

func restartKeepsLearned(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("the store keeps nothing past its life")
	}
	s := h.Open(t)
	require.NoError(t, s.Learn(ctx, learn(h, "k", "", "m", keypool.Limits{RPM: 7, TPD: 9000}, unknown, time.Time{})))
	require.NoError(t, s.Learn(ctx, learn(h, "k", "org", "m", keypool.Limits{RPD: 70}, unknown, time.Time{})))
	s = h.Reopen(t, s)
	assert.Equal(t, keypool.Limits{RPM: 7, TPD: 9000}, learned(t, s, h, "k", "m"))
	st, err := s.State(ctx, "suite", keypool.AccountID("org"), h.Now())
	require.NoError(t, err)
	require.Len(t, st.Models, 1)
	assert.Equal(t, keypool.Limits{RPD: 70}, st.Models[0].Learned)
}

// priced returns a take of key k costing cost millionths of a dollar,
// against budget.
func priced(h Harness, k string, cost int64, budget keypool.Budget) keypool.Claim {
	c := take(h, k, "m", keypool.Limits{}, 0)
	c.Cost, c.Budget = cost, budget
	return c
}

// spendOf takes a request of key k costing cost millionths of a dollar
// against budget, which must fit, and settles it at that cost.
func spendOf(t *testing.T, s keypool.Store, h Harness, k string, cost int64, budget keypool.Budget) {
	t.Helper()
	g := mustTake(t, s, priced(h, k, cost, budget))
	require.True(t, g.OK)
	require.NoError(t, g.Reservation.Settle(ctx, 10, cost))
}

func spent(t *testing.T, s keypool.Store, h Harness, id string) keypool.Budget {
	t.Helper()
	st, err := s.State(ctx, "suite", id, h.Now())
	require.NoError(t, err)
	return st.Spent
}

func budgetsHoldSpend(t *testing.T, h Harness) {
	s := h.Open(t)
	day := keypool.Budget{PerDay: 0.05} // 50,000 millionths of a dollar
	g1 := mustTake(t, s, priced(h, "k", 20_000, day))
	require.True(t, g1.OK)
	g2 := mustTake(t, s, priced(h, "k", 20_000, day))
	require.True(t, g2.OK)
	g := mustTake(t, s, priced(h, "k", 20_000, day))
	assert.False(t, g.OK, "60,000 is over a day's 50,000")
	assert.Equal(t, keypool.KindRate, g.Reason, "what requests in flight reserve is no spent budget")
	assert.False(t, g.RetryAt.Before(h.Now()), "retry soon: %v", g.RetryAt)
	assert.False(t, g.RetryAt.After(h.Now().Add(time.Minute)), "retry soon, when the reservations may have settled: %v", g.RetryAt)
	assert.InDelta(t, 0.04, spent(t, s, h, "k").PerDay, 1e-9, "Spent counts what requests in flight reserve")
	require.NoError(t, g1.Reservation.Settle(ctx, 100, 5_000))
	assert.InDelta(t, 0.025, spent(t, s, h, "k").PerDay, 1e-9, "a settle replaces the estimate by what was spent")
	g3 := mustTake(t, s, priced(h, "k", 20_000, day))
	assert.True(t, g3.OK, "25,000 + 20,000 fits")
	require.NoError(t, g2.Reservation.Release(ctx))
	assert.InDelta(t, 0.025, spent(t, s, h, "k").PerDay, 1e-9, "a release gives its cost back")
	assert.InDelta(t, 0.025, spent(t, s, h, "k").PerMonth, 1e-9, "the month counts it too")
	require.NoError(t, g3.Reservation.Settle(ctx, 100, 40_000))
	g = mustTake(t, s, priced(h, "k", 10_000, day))
	assert.False(t, g.OK, "45,000 spent and 10,000 more is over 50,000")
	assert.Equal(t, keypool.KindQuota, g.Reason, "a spent budget")
	assert.True(t, g.RetryAt.After(h.Now()) && !g.RetryAt.After(h.Now().Add(24*time.Hour)), "back with the next day: %v", g.RetryAt)
	month := keypool.Budget{PerMonth: 0.03}
	g = mustTake(t, s, priced(h, "k2", 40_000, month))
	assert.False(t, g.OK, "over the month's budget")
	assert.True(t, g.RetryAt.After(h.Now().Add(-time.Second)) && !g.RetryAt.After(h.Now().Add(32*24*time.Hour)), "back with the next month: %v", g.RetryAt)
	assert.True(t, mustTake(t, s, priced(h, "k3", 1<<40, keypool.Budget{})).OK, "no budget: no cap")
}

// reservationsHoldTheBudget holds a store to counting what admitted
// requests reserve against what is left until they settle: many takes at
// once never reserve more than the cap, and settles and releases give back
// what they do not spend.
func reservationsHoldTheBudget(t *testing.T, h Harness) {
	s := h.Open(t)
	day := keypool.Budget{PerDay: 0.1} // 100,000 millionths of a dollar
	const takers = 40
	var wg sync.WaitGroup
	grants := make(chan keypool.Grant, takers)
	for range takers {
		wg.Go(func() {
			g, err := s.Take(ctx, priced(h, "k", 10_000, day))
			assert.NoError(t, err)
			grants <- g
		})
	}
	wg.Wait()
	close(grants)
	var admitted []keypool.Grant
	for g := range grants {
		if g.OK {
			admitted = append(admitted, g)
		} else {
			assert.Equal(t, keypool.KindRate, g.Reason, "refused for what is in flight, not for what was spent")
		}
	}
	assert.Len(t, admitted, 10, "reservations in flight count against what is left: 10 of 10,000 fit 100,000")
	assert.InDelta(t, 0.1, spent(t, s, h, "k").PerDay, 1e-9)
	for i, g := range admitted {
		if i%2 == 0 {
			require.NoError(t, g.Reservation.Settle(ctx, 10, 2_000))
		} else {
			require.NoError(t, g.Reservation.Release(ctx))
		}
	}
	assert.InDelta(t, 0.01, spent(t, s, h, "k").PerDay, 1e-9, "five settled at 2,000, five released")
	g := mustTake(t, s, priced(h, "k", 90_000, day))
	assert.True(t, g.OK, "10,000 spent and 90,000 reserved fill 100,000")
	require.NoError(t, g.Reservation.Settle(ctx, 10, 120_000))
	assert.InDelta(t, 0.13, spent(t, s, h, "k").PerDay, 1e-9, "an answer that cost more than its reserve counts what it cost")
	g = mustTake(t, s, priced(h, "k", 1, day))
	assert.False(t, g.OK)
	assert.Equal(t, keypool.KindQuota, g.Reason)
}

// settleAtNoCostFreesTheReserve holds a store to giving back what a take
// reserved of a budget when it settles at no cost and at the tokens it
// took: an answer with no usage (an error the vendor served, a stream cut
// before its usage) settles so.
func settleAtNoCostFreesTheReserve(t *testing.T, h Harness) {
	s := h.Open(t)
	day := keypool.Budget{PerDay: 0.05}
	g := mustTake(t, s, priced(h, "k", 40_000, day))
	require.True(t, g.OK)
	require.NoError(t, g.Reservation.Settle(ctx, 0, 0))
	require.NoError(t, s.Flush(ctx))
	assert.InDelta(t, 0, spent(t, s, h, "k").PerDay, 1e-9, "a settle at no cost spends nothing and holds nothing")
	g = mustTake(t, s, priced(h, "k", 40_000, day))
	assert.True(t, g.OK, "nothing is spent or reserved: 40,000 fits 50,000")
}

// unboundedTakesAllThatIsLeft holds a store to reserving, for a request
// that states no bound, all that is left of each cap — the key's and its
// account's — so that nothing runs beside it, and to giving it back when
// it settles.
func unboundedTakesAllThatIsLeft(t *testing.T, h Harness) {
	s := h.Open(t)
	of := func(k string, cost int64) keypool.Claim {
		c := take(h, k, "m", keypool.Limits{}, 0)
		c.Account, c.Cost = "org", cost
		c.Budget, c.AccountBudget = keypool.Budget{PerDay: 0.05}, keypool.Budget{PerDay: 0.08, PerMonth: 0.07}
		return c
	}
	g := mustTake(t, s, of("k1", 10_000))
	require.True(t, g.OK)
	require.NoError(t, g.Reservation.Settle(ctx, 10, 10_000))
	unbounded := of("k1", 1_000)
	unbounded.Unbounded = true
	u := mustTake(t, s, unbounded)
	require.True(t, u.OK)
	assert.InDelta(t, 0.05, spent(t, s, h, "k1").PerDay, 1e-9, "the key's budget, all reserved")
	assert.InDelta(t, 0.07, spent(t, s, h, keypool.AccountID("org")).PerDay, 1e-9, "the account's, up to its tighter cap (the month's)")
	g = mustTake(t, s, of("k2", 1))
	assert.False(t, g.OK, "nothing runs beside it, on another key of the account either")
	assert.Equal(t, keypool.KindRate, g.Reason)
	assert.False(t, g.RetryAt.After(h.Now().Add(time.Minute)), "retry soon: %v", g.RetryAt)
	require.NoError(t, u.Reservation.Settle(ctx, 10, 3_000))
	assert.InDelta(t, 0.013, spent(t, s, h, "k1").PerDay, 1e-9, "it spent what it cost")
	assert.InDelta(t, 0.013, spent(t, s, h, keypool.AccountID("org")).PerDay, 1e-9)
	assert.True(t, mustTake(t, s, of("k2", 1)).OK, "and gave back the rest")
	spentOut := of("k3", 1)
	spentOut.Unbounded = true
	spentOut.Cost = 60_000
	g = mustTake(t, s, spentOut)
	assert.False(t, g.OK, "an unbounded request needs what is left to hold its estimate")
	assert.Equal(t, keypool.KindQuota, g.Reason)
}

func accountBudgetsAreShared(t *testing.T, h Harness) {
	s := h.Open(t)
	of := func(k string, cost int64) keypool.Claim {
		c := take(h, k, "m", keypool.Limits{}, 0)
		c.Account, c.Cost, c.AccountBudget = "org", cost, keypool.Budget{PerDay: 0.05}
		return c
	}
	require.True(t, mustTake(t, s, of("k1", 30_000)).OK)
	assert.False(t, mustTake(t, s, of("k2", 30_000)).OK, "the account's budget, whichever key spends it")
	assert.True(t, mustTake(t, s, of("k2", 20_000)).OK)
	assert.InDelta(t, 0.05, spent(t, s, h, keypool.AccountID("org")).PerDay, 1e-9)
	own := of("k3", 10_000)
	own.Budget = keypool.Budget{PerDay: 1}
	own.AccountBudget = keypool.Budget{PerDay: 1}
	require.True(t, mustTake(t, s, own).OK)
	assert.InDelta(t, 0.01, spent(t, s, h, "k3").PerDay, 1e-9, "a key's own budget counts its own spend")
}

func budgetsReturnWithTheNextDay(t *testing.T, h Harness) {
	s := h.Open(t)
	day := keypool.Budget{PerDay: 0.01}
	spendOf(t, s, h, "k", 10_000, day)
	g := mustTake(t, s, priced(h, "k", 1, day))
	require.False(t, g.OK)
	require.Equal(t, keypool.KindQuota, g.Reason)
	h.Advance(t, g.RetryAt.Sub(h.Now()))
	assert.True(t, mustTake(t, s, priced(h, "k", 10_000, day)).OK, "a take at RetryAt goes through: the next day")
}

func restartKeepsSpend(t *testing.T, h Harness) {
	if h.Reopen == nil {
		t.Skip("the store keeps nothing past its life")
	}
	s := h.Open(t)
	day := keypool.Budget{PerDay: 0.05}
	require.True(t, mustTake(t, s, priced(h, "k", 30_000, day)).OK)
	s = h.Reopen(t, s)
	assert.InDelta(t, 0.03, spent(t, s, h, "k").PerDay, 1e-9)
	assert.False(t, mustTake(t, s, priced(h, "k", 30_000, day)).OK, "the spend before the restart counts")
}

// slack is how far a store's answer of when a bench ends may read from the
// end the suite set: a millisecond, a store's grain; on a real clock, some
// more, for a store that keeps a bench's end by its server's clock and
// reads it back by the caller's, a round trip apart.
func (h Harness) slack() time.Duration {
	if h.RealTime {
		return 20 * time.Millisecond
	}
	return time.Millisecond
}
