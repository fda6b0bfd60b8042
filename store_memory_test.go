package keypool

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryStoreClockSteppingBack(t *testing.T) {
	s := newMemoryStore()
	now := time.Date(2026, 1, 1, 0, 1, 0, 0, time.UTC)
	take := Claim{Provider: "p", KeyID: "k", Model: "m", Limits: Limits{RPM: 2}}
	for _, at := range []time.Time{now, now.Add(-30 * time.Second)} {
		take.Now = at
		g, err := s.Take(t.Context(), take)
		require.NoError(t, err)
		require.True(t, g.OK)
		assert.Equal(t, now.UnixNano(), g.Reservation.(*memReservation).at, "a take is recorded at the latest time seen")
	}
	take.Now = now.Add(50 * time.Second)
	g, err := s.Take(t.Context(), take)
	require.NoError(t, err)
	assert.False(t, g.OK, "a take from a clock that stepped back still counts a full minute")
	assert.Equal(t, KindRate, g.Reason)
}

func TestMemoryStoreBoundsModelsPerKey(t *testing.T) {
	s := newMemoryStore()
	take := Claim{Provider: "p", KeyID: "k", Now: time.Now(), Limits: Limits{RPM: 1_000_000}}
	for i := range maxModelsPerKey + 50 {
		take.Model = string(rune('a'+i%26)) + time.Duration(i).String()
		_, err := s.Take(t.Context(), take)
		require.NoError(t, err)
	}
	st, err := s.State(t.Context(), "p", "k", take.Now)
	require.NoError(t, err)
	assert.Len(t, st.Models, maxModelsPerKey+1, "models beyond the bound share one entry")
}

func TestMemoryStoreClockPutRight(t *testing.T) {
	ahead := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC) // a clock years ahead
	right := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		limits Limits
		days   calendar
		takes  int
		wait   time.Duration // how long after the clock is put right the key takes again
	}{
		{"minute", Limits{RPM: 1}, calendar{}, 1, time.Minute},
		{"sliding day", Limits{RPD: 5}, calendar{}, 5, 24 * time.Hour},
		{"calendar day", Limits{RPD: 5}, calendar{loc: time.UTC}, 5, 24 * time.Hour},
		{"an hour and a second back", Limits{RPD: 3}, calendar{}, 3, 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newMemoryStore()
			from := ahead
			if tt.name == "an hour and a second back" {
				from = right.Add(time.Hour + time.Second)
			}
			c := Claim{Provider: "p", KeyID: "k", Model: "m", Limits: tt.limits, DayZone: tt.days.loc, DayHour: tt.days.hour, Now: from}
			for i := range tt.takes {
				g, err := s.Take(t.Context(), c)
				require.NoError(t, err)
				require.True(t, g.OK, "take %d", i+1)
			}
			c.Now = right
			g, err := s.Take(t.Context(), c)
			require.NoError(t, err)
			assert.False(t, g.OK, "what was taken under the wrong clock still counts: no second limit")
			assert.True(t, !g.RetryAt.After(right.Add(tt.wait+time.Hour)), "the key is back within its window of the corrected clock, not years on: %v", g.RetryAt)
			c.Now = right.Add(tt.wait + time.Hour)
			g, err = s.Take(t.Context(), c)
			require.NoError(t, err)
			assert.True(t, g.OK, "back once its window has passed on the corrected clock")
		})
	}
}

func TestMemoryStoreClockPutRightMovesBenches(t *testing.T) {
	s := newMemoryStore()
	ahead := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	right := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := Claim{Provider: "p", KeyID: "k", Model: "m", Now: ahead}
	_, err := s.Take(t.Context(), c)
	require.NoError(t, err)
	require.NoError(t, s.Bench(t.Context(), Bench{Provider: "p", KeyID: "k", Model: "m", Kind: KindRate, Until: ahead.Add(time.Minute)}))
	c.Now = right
	g, err := s.Take(t.Context(), c)
	require.NoError(t, err)
	assert.False(t, g.OK, "the bench still holds")
	assert.Equal(t, right.Add(time.Minute), g.RetryAt, "for the minute it was set for")
}

// A budget spent while the clock ran a day ahead still counts once the
// clock is put right: the day's $0.05 admits $0.01, then two of $0.02, and
// no third.
func TestMemoryStoreClockPutRightKeepsSpend(t *testing.T) {
	s := newMemoryStore()
	right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	claim := func(now time.Time, cost int64) Claim {
		return Claim{Provider: "p", KeyID: "k", Model: "m", Now: now, Budget: Budget{PerDay: 0.05}, Cost: cost}
	}
	g, err := s.Take(t.Context(), claim(right.Add(24*time.Hour), 10_000))
	require.NoError(t, err)
	require.True(t, g.OK)
	require.NoError(t, g.Reservation.Settle(t.Context(), 0, 10_000))
	served := 0
	for range 4 {
		g, err := s.Take(t.Context(), claim(right.Add(5*time.Second), 20_000))
		require.NoError(t, err)
		if g.OK {
			served++
			require.NoError(t, g.Reservation.Settle(t.Context(), 0, 20_000))
		}
	}
	assert.Equal(t, 2, served, "$0.01, then $0.02 twice, within $0.05 a day")
}

// A take recorded while the clock ran ahead and released once it is put
// right stays counted, as it was moved: the release changes nothing rather
// than emptying the window, so the minute of RPM 3 admits nothing more.
func TestMemoryStoreClockPutRightKeepsReleasedTakes(t *testing.T) {
	s := newMemoryStore()
	right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, lim := range []Limits{{RPM: 3}, {RPM: 3, TPM: 1 << 20}, {RPM: 200, TPM: 900}} {
		t.Run(fmt.Sprint(lim), func(t *testing.T) {
			k := fmt.Sprint(lim)
			c := Claim{Provider: "p", KeyID: k, Model: "m", Limits: lim, Tokens: 300, Now: right.Add(24 * time.Hour)}
			var held []Reservation
			for range 3 {
				g, err := s.Take(t.Context(), c)
				require.NoError(t, err)
				require.True(t, g.OK)
				held = append(held, g.Reservation)
			}
			c.Now = right.Add(5 * time.Second)
			g, err := s.Take(t.Context(), c)
			require.NoError(t, err)
			require.False(t, g.OK, "the minute holds the three taken ahead")
			require.NoError(t, held[0].Release(t.Context()))
			require.NoError(t, held[1].Settle(t.Context(), 0, 0))
			g, err = s.Take(t.Context(), c)
			require.NoError(t, err)
			assert.False(t, g.OK, "the release and the settle left the minute as it was")
		})
	}
}

func TestMemoryStoreEvictsIdleModels(t *testing.T) {
	s := newMemoryStore()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := Claim{Provider: "p", KeyID: "k", Limits: Limits{RPM: 100}, Now: now}
	for i := range maxModelsPerKey {
		c.Model = fmt.Sprintf("m%d", i)
		_, err := s.Take(t.Context(), c)
		require.NoError(t, err)
	}
	// Every entry holds a take: a new model shares the overflow entry.
	c.Model = "crowded"
	_, err := s.Take(t.Context(), c)
	require.NoError(t, err)
	named := c
	named.Model, named.Named = "configured", true
	_, err = s.Take(t.Context(), named)
	require.NoError(t, err)
	st, err := s.State(t.Context(), "p", "k", now)
	require.NoError(t, err)
	assert.True(t, hasModel(st, overflowModel), "a full key shares one entry")
	assert.True(t, hasModel(st, "configured"), "a model the pool was configured for has its own entry")

	// A minute on, the entries hold nothing in force: new models take
	// their places, and a bench of one never holds another.
	c.Now = now.Add(2 * time.Minute)
	for _, m := range []string{"new-a", "new-b"} {
		c.Model = m
		g, err := s.Take(t.Context(), c)
		require.NoError(t, err)
		require.True(t, g.OK)
	}
	require.NoError(t, s.Bench(t.Context(), Bench{Provider: "p", KeyID: "k", Model: "new-a", Kind: KindRate, Until: c.Now.Add(time.Minute)}))
	c.Model = "new-b"
	g, err := s.Take(t.Context(), c)
	require.NoError(t, err)
	assert.True(t, g.OK, "a 429 for one model does not refuse another")
	st, err = s.State(t.Context(), "p", "k", c.Now)
	require.NoError(t, err)
	assert.True(t, hasModel(st, "new-a") && hasModel(st, "new-b"), "new models have entries of their own")
	assert.LessOrEqual(t, len(st.Models), maxModelsPerKey+2, "the bound holds: the overflow entry and the named model beyond it")
}

// TestMemKeyRecentModel holds that the entry a key keeps of the model it
// last found is the one its map holds: an evicted entry is never found
// again, and a model that shares the overflow entry looks again, at its
// next request, for an entry of its own.
func TestMemKeyRecentModel(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	rng := rand.New(rand.NewPCG(1, 2))
	k := &memKey{models: map[string]*memModel{}}
	for i := range 20_000 {
		name := fmt.Sprint("m-", rng.IntN(maxModelsPerKey+maxModelsPerKey/4))
		m := k.model(name, now, false)
		if own := k.models[name]; own != nil {
			require.Same(t, own, m, "step %d: %s's entry", i, name)
		} else {
			require.Same(t, k.models[overflowModel], m, "step %d: %s, without an entry, shares the overflow entry", i, name)
		}
		// Some entries are in force, some idle, so that the bound both
		// evicts and overflows.
		m.bench.until = now + int64(rng.IntN(2))
	}

	k = &memKey{models: map[string]*memModel{}}
	for i := range maxModelsPerKey {
		k.model(fmt.Sprint("busy-", i), now, false).bench.until = now + 1
	}
	shared := k.model("x", now, false)
	assert.Same(t, k.models[overflowModel], shared, "beyond the bound, with no entry idle, x shares the overflow entry")
	for name, m := range k.models {
		if name != overflowModel {
			m.bench.until = 0
		}
	}
	own := k.model("x", now, false)
	assert.NotSame(t, shared, own, "once entries are idle, x gets one of its own")
	assert.Same(t, own, k.models["x"])
}

func TestMemoryStoreRefusesModelNamesItCannotKeep(t *testing.T) {
	s := newMemoryStore()
	for _, name := range []string{strings.Repeat("m", 257), "bad\x00name", "\xff"} {
		_, err := s.Take(t.Context(), Claim{Provider: "p", KeyID: "k", Model: name, Now: time.Now()})
		assert.ErrorContains(t, err, "model name")
		assert.ErrorContains(t, s.Bench(t.Context(), Bench{Provider: "p", KeyID: "k", Model: name, Until: time.Now()}), "model name")
	}
}

func hasModel(st KeyStats, model string) bool {
	for _, m := range st.Models {
		if m.Model == model {
			return true
		}
	}
	return false
}

// TestMemoryStoreReservationLearnIsLearn holds that learning into the
// entries a take counted in (memReservation.learn, the pool's path after a
// take of its own store) leaves the store as Learn does with the Stated
// the pool builds of the same answer, for a key alone and for a key of an
// account.
func TestMemoryStoreReservationLearnIsLearn(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eachAccount(t, func(t *testing.T, account string) {
		viaLearn, viaTake := newMemoryStore(), newMemoryStore()
		claim := Claim{Provider: "p", KeyID: "k", Account: account, Model: "m", Limits: Limits{RPM: 10, TPM: 1000}, Tokens: 5, Now: now}
		stated := statedWindows{limits: Limits{RPM: 4, TPM: 800}, used: Limits{RPM: 3, RPD: -1, TPM: 500, TPD: -1},
			minuteWait: 19 * time.Second, any: true}
		answered := now.Add(time.Second)
		st := Stated{Provider: "p", KeyID: "k", Account: account, Model: "m",
			Limits: stated.limits, Used: stated.used, MinuteReset: answered.Add(stated.minuteWait), Now: answered}
		for _, s := range []*memoryStore{viaLearn, viaTake} {
			g, err := s.Take(t.Context(), claim)
			require.NoError(t, err)
			require.True(t, g.OK)
			if s == viaTake {
				g.Reservation.(*memReservation).learn(&stated, answered)
				continue
			}
			require.NoError(t, s.Learn(t.Context(), st))
		}
		got := sameState(t, viaLearn, viaTake, entryOf("k", account), now.Add(2*time.Second))
		require.Len(t, got.Models, 1)
		assert.Equal(t, Limits{RPM: 4, TPM: 800}, got.Models[0].Learned)
		assert.Equal(t, Usage{MinuteRequests: 3, MinuteTokens: 500}, got.Models[0].Usage, "the minute window is raised to the vendor's count")
		assert.Equal(t, Usage{MinuteRequests: 1, MinuteTokens: 5}, sameState(t, viaLearn, viaTake, entryOf("k", account), now.Add(21*time.Second)).Models[0].Usage,
			"what the vendor counted beyond the take leaves at its reset; the take stays")
	})
}

// TestMemoryStoreTakeAtIsTake holds that a take from the entries a pool
// keeps for a key (takeAt, the pool's path with its own store) counts as
// Take does, finds the key's and account's entries once and keeps them,
// and records the request in the reservation it is given.
func TestMemoryStoreTakeAtIsTake(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	eachAccount(t, func(t *testing.T, account string) {
		viaTake, viaEntries := newMemoryStore(), newMemoryStore()
		claim := Claim{Provider: "p", KeyID: "k", Account: account, Model: "m", Limits: Limits{RPM: 2, TPM: 1000}, Tokens: 5, Now: now}
		var e memEntries
		var spare memReservation
		for i := range 3 {
			want, err := viaTake.Take(t.Context(), claim)
			require.NoError(t, err)
			r := &spare
			if i > 0 {
				r = nil // a take without a reservation of the caller's
			}
			got, err := viaEntries.takeAt(&e, r, &claim)
			require.NoError(t, err)
			assert.Equal(t, want.OK, got.OK, "take %d", i)
			assert.Equal(t, want.RetryAt, got.RetryAt, "take %d", i)
			if i == 0 {
				assert.Same(t, &spare, got.Reservation, "the request is recorded where the caller said")
			}
		}
		assert.Same(t, viaEntries.key("p", "k"), e.own.Load(), "the key's entry is kept")
		if account == "" {
			assert.Nil(t, e.account.Load())
		} else {
			assert.Same(t, viaEntries.account("p", account), e.account.Load(), "the account's entry is kept")
		}
		id := entryOf("k", account)
		sameState(t, viaTake, viaEntries, id, now)
		require.NoError(t, spare.Settle(t.Context(), 100, 0))
		got, err := viaEntries.State(t.Context(), "p", id, now)
		require.NoError(t, err)
		assert.Equal(t, int64(105), got.Models[0].Usage.MinuteTokens, "the caller's reservation settles the entry it counted in")
	})

	// Entries once found are not looked up again: a take counts in the
	// entry e holds.
	s := newMemoryStore()
	held := &memKey{models: map[string]*memModel{}}
	var e memEntries
	e.own.Store(held)
	g, err := s.takeAt(&e, nil, &Claim{Provider: "p", KeyID: "k", Model: "m", Limits: Limits{RPM: 5}, Now: now})
	require.NoError(t, err)
	require.True(t, g.OK)
	assert.NotNil(t, held.models["m"], "the take counted in the entry held")
	_, looked := s.keys.Load(keyRef{"p", "k"})
	assert.False(t, looked, "the store looked the key up")
}

// TestOwnMemory holds that the pool takes the fast path only into the
// package's own stores, exactly: a type that embeds one may change what
// its methods do, and is used through them.
func TestOwnMemory(t *testing.T) {
	mem := newMemoryStore()
	assert.Same(t, mem, ownMemory(mem))
	badger, err := OpenBadgerStore(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = badger.Close() })
	assert.Same(t, badger.memoryStore, ownMemory(badger))
	assert.Nil(t, ownMemory(&failingStore{memoryStore: mem}), "a store that embeds the memory store")
	assert.Nil(t, ownMemory(struct{ *BadgerStore }{badger}), "a store that embeds the Badger store")
	assert.Nil(t, ownMemory(nil))
}

// entryOf is the ID a memory store keeps a key's windows under: its
// account's, when it names one.
func entryOf(keyID, account string) string {
	if account != "" {
		return accountID(account)
	}
	return keyID
}

// sameState holds that two memory stores keep the same state for provider
// "p"'s entry id at at, and returns it.
func sameState(t *testing.T, want, got *memoryStore, id string, at time.Time) KeyStats {
	t.Helper()
	w, err := want.State(t.Context(), "p", id, at)
	require.NoError(t, err)
	g, err := got.State(t.Context(), "p", id, at)
	require.NoError(t, err)
	assert.Equal(t, w, g)
	return g
}

// eachAccount runs test for a key alone and for a key of an account.
func eachAccount(t *testing.T, test func(t *testing.T, account string)) {
	for _, account := range []string{"", "org"} {
		t.Run("account="+account, func(t *testing.T) { test(t, account) })
	}
}

// wrappedStore embeds the package's Badger store and counts the takes and
// statements that reach its own methods.
type wrappedStore struct {
	*BadgerStore
	takes, learns atomic.Int64
}

func (s *wrappedStore) Take(ctx context.Context, c Claim) (Grant, error) {
	s.takes.Add(1)
	return s.BadgerStore.Take(ctx, c)
}

func (s *wrappedStore) Learn(ctx context.Context, st Stated) error {
	s.learns.Add(1)
	return s.BadgerStore.Learn(ctx, st)
}

// A store that embeds one of the package's and has a Take and a Learn of its
// own is used through them: the pool's fast paths are for the package's
// stores alone.
func TestPoolUsesAWrappedStoresMethods(t *testing.T) {
	inner, err := OpenBadgerStore(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() { _ = inner.Close() })
	store := &wrappedStore{BadgerStore: inner}
	f := newFixture(t, WithStore(store))
	for _, k := range threeKeys() {
		f.vendor.on(k.Secret, answer{status: 200, header: map[string]string{
			"X-Ratelimit-Limit-Requests": "500", "X-Ratelimit-Remaining-Requests": "499"}})
	}
	for range 3 {
		_, err := get(t, f.client, f.url)
		require.NoError(t, err)
	}
	assert.Equal(t, int64(3), store.takes.Load(), "takes through the store's own Take")
	assert.Equal(t, int64(3), store.learns.Load(), "statements through the store's own Learn")
}

// A take recorded while the clock ran two hours ahead, past midnight, and
// settled once the clock is put right: the next take carried the day's
// spend back into the day that holds the right time, which no longer holds
// the take's time, so the settle neither gives back what the take reserved
// nor counts what it cost. Spent: $0.04 + $0.02; a day's $0.05 must refuse
// another $0.02.
func TestMemoryStoreSettleAfterClockPutRightCountsItsCost(t *testing.T) {
	s := newMemoryStore()
	right := time.Date(2026, 3, 1, 22, 30, 0, 0, time.UTC)
	claim := func(now time.Time, cost int64) Claim {
		return Claim{Provider: "p", KeyID: "k", Model: "m", Now: now, Budget: Budget{PerDay: 0.05}, Cost: cost}
	}
	a, err := s.Take(t.Context(), claim(right.Add(2*time.Hour), 10_000)) // 00:30 the next day
	require.NoError(t, err)
	require.True(t, a.OK)
	now := right.Add(5 * time.Second)
	b, err := s.Take(t.Context(), claim(now, 20_000))
	require.NoError(t, err)
	require.True(t, b.OK)
	require.NoError(t, a.Reservation.Settle(t.Context(), 0, 40_000)) // it cost more than it reserved
	require.NoError(t, b.Reservation.Settle(t.Context(), 0, 20_000))
	st, err := s.State(t.Context(), "p", "k", now)
	require.NoError(t, err)
	assert.InDelta(t, 0.06, st.Spent.PerDay, 1e-9, "the day's spend: both takes' costs")
	c, err := s.Take(t.Context(), claim(now, 20_000))
	require.NoError(t, err)
	assert.False(t, c.OK, "$0.06 spent: no $0.02 more within $0.05 a day")
}

// In a zone whose clocks spring forward at midnight (America/Havana, on
// 2026-03-08 from 00:00 to 01:00), windowspec.CalendarDay returns an empty
// day for the whole of that day: its start, midnight, does not exist and
// time.Date moves it back to 23:00 the day before, and the end is built from
// that start's date. Every take then starts a new day: a calendar RPD of 1
// and a day's budget admit every request.
func TestCalendarDayWhereMidnightIsSkipped(t *testing.T) {
	havana, err := time.LoadLocation("America/Havana")
	require.NoError(t, err)
	now := time.Date(2026, 3, 8, 12, 0, 0, 0, havana)
	s := newMemoryStore()
	served := 0
	for range 3 {
		g, err := s.Take(t.Context(), Claim{Provider: "p", KeyID: "rpd", Model: "m", Now: now,
			Limits: Limits{RPD: 1}, DayZone: havana})
		require.NoError(t, err)
		if g.OK {
			served++
		}
	}
	assert.Equal(t, 1, served, "a calendar day of RPD 1")
	served = 0
	for range 3 {
		g, err := s.Take(t.Context(), Claim{Provider: "p", KeyID: "budget", Model: "m", Now: now,
			Budget: Budget{PerDay: 0.05}, Cost: 40_000, DayZone: havana})
		require.NoError(t, err)
		if g.OK {
			served++
			require.NoError(t, g.Reservation.Settle(t.Context(), 0, 40_000))
		}
	}
	assert.Equal(t, 1, served, "a day's $0.05 admits one $0.04")
}
