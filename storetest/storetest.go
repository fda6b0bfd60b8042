// Package storetest is the conformance suite every keypool.Store passes: the
// memory and Badger stores of package keypool, the Redis store of package
// redisstore, and any store a user writes.
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
	// that need minutes to pass.
	RealTime bool
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
		{"KeysAreSeparate", keysAreSeparate, false},
		{"Restart", restart, false},
		{"FullKeyKeepsNamedModels", fullKeyKeepsNamedModels, false},
		{"IdleModelsMakeRoom", idleModelsMakeRoom, true},
		{"RefusesModelNamesItCannotKeep", refusesBadModelNames, false},
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
	st, err := s.State(ctx, "suite", key, h.Now())
	require.NoError(t, err)
	for _, m := range st.Models {
		if m.Model == model {
			return m.Usage
		}
	}
	return keypool.Usage{}
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
	require.NoError(t, g1.Reservation.Settle(ctx, 10))
	assert.Equal(t, int64(10), usage(t, s, h, "k", "m").MinuteTokens)
	require.NoError(t, g1.Reservation.Settle(ctx, 20))
	assert.Equal(t, int64(20), usage(t, s, h, "k", "m").MinuteTokens, "a second settle replaces the first")
	require.NoError(t, g1.Reservation.Settle(ctx, 10))
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
	assert.WithinDuration(t, until, g.RetryAt, time.Millisecond)
	assert.True(t, mustTake(t, s, take(h, "k", "other", keypool.Limits{}, 0)).OK, "another model is free")
	ms := modelState(t, s, h, "k", "m")
	assert.Equal(t, keypool.KindQuota, ms.Bench.Kind)
	assert.WithinDuration(t, until, ms.Bench.Until, time.Millisecond)
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
	assert.WithinDuration(t, long, g.RetryAt, time.Millisecond)

	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k2", AllModels: true, Kind: keypool.KindAuth, Until: long}))
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k2", AllModels: true, Kind: keypool.KindRate, Until: h.Now().Add(time.Second)}))
	g = mustTake(t, s, take(h, "k2", "m", keypool.Limits{}, 0))
	assert.Equal(t, keypool.KindAuth, g.Reason, "the longer bench of all models stands")
	assert.WithinDuration(t, long, g.RetryAt, time.Millisecond)
}

func benchEnds(t *testing.T, h Harness) {
	s := h.Open(t)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m", Kind: keypool.KindRate, Until: h.Now().Add(1500 * time.Millisecond)}))
	require.False(t, mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0)).OK)
	h.Advance(t, 2*time.Second)
	assert.True(t, mustTake(t, s, take(h, "k", "m", keypool.Limits{}, 0)).OK, "the bench has ended")
	assert.Zero(t, modelState(t, s, h, "k", "m").Bench, "no bench is reported after its end")
}

func level(t *testing.T, h Harness) {
	s := h.Open(t)
	require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "suite", KeyID: "k", Model: "m", Kind: keypool.KindQuota,
		Until: h.Now().Add(time.Second), Level: 2}))
	h.Advance(t, 2*time.Second)
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
	assert.WithinDuration(t, until, ms.Bench.Until, time.Millisecond)
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
const maxModels = 1024

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
