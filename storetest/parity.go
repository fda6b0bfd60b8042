package storetest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

// Parity offers the same random takes, settles, releases, benches, level
// resets and vendors' statements to a store h opens and to a MemoryStore,
// at the same times (h.Now, moved by h.Advance), and requires the same
// answers and the same state after every step: a store that passes counts
// as the MemoryStore does, window for window. It also fills a key with
// more models than a store keeps. It needs a clock h moves without
// waiting: with RealTime it skips.
func Parity(t *testing.T, h Harness) {
	t.Helper()
	if h.RealTime {
		t.Skip("needs hours to pass")
	}
	la, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	cases := []struct {
		name  string
		days  *time.Location // calendar days at midnight there; nil slides
		gap   time.Duration  // the longest step between operations
		steps int
		lim   keypool.Limits
		cap   keypool.Limits
		// buckets: the MemoryStore counts some of the case's windows in
		// buckets, which a store with ExactTimes does not.
		buckets bool
	}{
		{"minute", nil, 1500 * time.Millisecond, 600, keypool.Limits{RPM: 7, TPM: 900}, keypool.Limits{}, false},
		{"day", nil, 20 * time.Minute, 500, keypool.Limits{RPD: 30, TPD: 5000}, keypool.Limits{}, true},
		{"exact day", nil, 20 * time.Minute, 500, keypool.Limits{RPM: 5, RPD: 20, TPD: 4000}, keypool.Limits{RPD: 25}, false},
		{"calendar", la, 20 * time.Minute, 500, keypool.Limits{RPD: 15}, keypool.Limits{TPD: 4000}, false},
		{"cap", nil, time.Second, 600, keypool.Limits{RPM: 10}, keypool.Limits{RPM: 12, TPD: 3000}, true},
		{"exact cap", nil, time.Second, 600, keypool.Limits{RPM: 10, TPM: 1000}, keypool.Limits{RPM: 12, TPM: 1500}, false},
		{"all", nil, 3 * time.Second, 600, keypool.Limits{RPM: 9, TPM: 1200, RPD: 200, TPD: 20_000}, keypool.Limits{RPM: 15}, true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.buckets && h.ExactTimes {
				t.Skip("the MemoryStore counts these windows in buckets")
			}
			parity(t, h, rand.New(rand.NewPCG(uint64(i)+seedOffset, 42)), c.days, c.gap, c.steps, c.lim, c.cap)
		})
	}
	t.Run("ManyModelsShareOneEntry", func(t *testing.T) { manyModels(t, h) })
}

// parity runs one case of Parity: steps random operations on key "k" of
// provider "p", each at most gap after the one before, with the limits lim
// and cap, counting days in days (nil: sliding).
func parity(t *testing.T, h Harness, rng *rand.Rand, days *time.Location, gap time.Duration, steps int, lim, cap keypool.Limits) {
	s := h.Open(t)
	ms := keypool.NewMemoryStore()
	type taken struct {
		c      keypool.Claim
		sg, mg keypool.Grant
	}
	var grants []taken
	models := []string{"a", "b", "c"}
	for i := range steps {
		// Steps of whole milliseconds: a store may keep time to the
		// millisecond (a Redis server's clock does).
		h.Advance(t, time.Duration(rng.Int64N(int64(gap/time.Millisecond)))*time.Millisecond)
		now := h.Now()
		model := models[rng.IntN(len(models))]
		at := fmt.Sprintf("step %d at %s", i, now.Format(time.RFC3339Nano))
		op := rng.IntN(23)
		if op >= 20 && h.ExactTimes {
			op = rng.IntN(14) // a take in place of a vendor's statement
		}
		if testing.Verbose() {
			t.Logf("%s: op %d model %s", at, op, model)
		}
		switch {
		case op < 14:
			c := keypool.Claim{Provider: "p", KeyID: "k", Model: model, Limits: lim, Cap: cap,
				DayZone: days, Tokens: rng.Int64N(250), Now: now, Cost: rng.Int64N(3000)}
			if rng.IntN(2) == 0 {
				c.Budget = keypool.Budget{PerDay: 0.05, PerMonth: 0.4}
				c.Unbounded = rng.IntN(6) == 0 // it reserves all that is left
			}
			sg, err := s.Take(ctx, c)
			require.NoError(t, err)
			mg, err := ms.Take(ctx, c)
			require.NoError(t, err)
			require.Equal(t, public(mg), public(sg), "%s: take of %s", at, model)
			if sg.OK {
				grants = append(grants, taken{c, sg, mg})
			}
		case op < 17 && len(grants) > 0:
			g := grants[rng.IntN(len(grants))]
			if op == 16 {
				require.NoError(t, g.sg.Reservation.Release(ctx))
				require.NoError(t, g.mg.Reservation.Release(ctx))
			} else {
				tokens, cost := rng.Int64N(400), rng.Int64N(4000)
				require.NoError(t, g.sg.Reservation.Settle(ctx, tokens, cost))
				require.NoError(t, g.mg.Reservation.Settle(ctx, tokens, cost))
			}
		case op >= 20:
			// What a vendor states: some limits, some counts, a reset
			// within the window or none.
			st := keypool.Stated{Provider: "p", KeyID: "k", Model: model, DayZone: days, Now: now,
				Used: keypool.Limits{RPM: -1, RPD: -1, TPM: -1, TPD: -1}}
			pick := func(limit int64) (int64, int64) {
				if rng.IntN(2) == 0 {
					return 0, -1
				}
				l := 1 + rng.Int64N(max(limit*2, 2))
				return l, rng.Int64N(l + 1)
			}
			st.Limits.RPM, st.Used.RPM = pick(lim.RPM)
			st.Limits.TPM, st.Used.TPM = pick(lim.TPM)
			st.Limits.RPD, st.Used.RPD = pick(lim.RPD)
			st.Limits.TPD, st.Used.TPD = pick(lim.TPD)
			if rng.IntN(2) == 0 {
				st.MinuteReset = now.Add(time.Duration(rng.Int64N(int64(time.Minute))))
				st.DayReset = now.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
			}
			require.NoError(t, s.Learn(ctx, st))
			require.NoError(t, ms.Learn(ctx, st))
		case op < 19:
			b := keypool.Bench{Provider: "p", KeyID: "k", Model: model, AllModels: op == 18 && rng.IntN(3) == 0,
				Kind: keypool.Kind(1 + rng.IntN(4)), Level: rng.IntN(4),
				Until: now.Add(time.Duration(rng.Int64N(int64(3*gap/time.Millisecond))) * time.Millisecond)}
			require.NoError(t, s.Bench(ctx, b))
			require.NoError(t, ms.Bench(ctx, b))
		default:
			b := keypool.Bench{Provider: "p", KeyID: "k", Model: model}
			require.NoError(t, s.Bench(ctx, b))
			require.NoError(t, ms.Bench(ctx, b))
		}
		sst, err := s.State(ctx, "p", "k", now)
		require.NoError(t, err)
		mst, err := ms.State(ctx, "p", "k", now)
		require.NoError(t, err)
		require.Equal(t, sorted(mst), sorted(sst), "%s: state", at)
	}
}

// manyModels takes a request for each of more models than a store keeps
// for one key, of both stores, and requires the same answers and as many
// entries: MaxModelsPerKey, and the one the rest share.
func manyModels(t *testing.T, h Harness) {
	s := h.Open(t)
	ms := keypool.NewMemoryStore()
	lim := keypool.Limits{RPM: 1}
	for i := range maxModels + 6 {
		c := take(h, "k", fmt.Sprintf("model-%d", i), lim, 0)
		sg, err := s.Take(ctx, c)
		require.NoError(t, err)
		mg, err := ms.Take(ctx, c)
		require.NoError(t, err)
		require.Equal(t, public(mg), public(sg), "take of model %d", i)
	}
	sst, err := s.State(ctx, "suite", "k", h.Now())
	require.NoError(t, err)
	mst, err := ms.State(ctx, "suite", "k", h.Now())
	require.NoError(t, err)
	require.Equal(t, sorted(mst), sorted(sst))
	require.Len(t, sst.Models, maxModels+1, "models")
	require.True(t, slices.ContainsFunc(sst.Models, func(m keypool.ModelStats) bool { return m.Model == keypool.OverflowModel }),
		"the models beyond the bound share one entry, named OverflowModel")
}

// public returns what a grant says to its users, without the reservation
// each store keeps for itself.
func public(g keypool.Grant) keypool.Grant {
	g.Reservation = nil
	return g
}

// sorted returns st with its models in order of their names: a store
// answers State in any order.
func sorted(st keypool.KeyStats) keypool.KeyStats {
	st.Models = slices.Clone(st.Models)
	slices.SortFunc(st.Models, func(a, b keypool.ModelStats) int { return cmp.Compare(a.Model, b.Model) })
	return st
}

// seedOffset moves Parity's seeds, to walk other random paths:
// PARITY_SEED=100 go test -run Parity ./redisstore.
var seedOffset = func() uint64 { v, _ := strconv.ParseUint(os.Getenv("PARITY_SEED"), 10, 64); return v }()
