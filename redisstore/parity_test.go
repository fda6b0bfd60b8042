package redisstore_test

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
	"github.com/keypool-go/keypool/redisstore"
)

// TestSameAsMemoryStore offers the same random takes, settles, releases,
// benches, level resets and vendors' statements to a Redis store (on miniredis) and to a
// MemoryStore, at the same times, and requires the same answers and the
// same state after every step: the two stores share the window arithmetic.
func TestSameAsMemoryStore(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	cases := []struct {
		name  string
		days  *time.Location // calendar days at midnight there; nil slides
		gap   time.Duration  // the longest step between operations
		steps int
		lim   keypool.Limits
		cap   keypool.Limits
	}{
		{"minute", nil, 1500 * time.Millisecond, 600, keypool.Limits{RPM: 7, TPM: 900}, keypool.Limits{}},
		{"day", nil, 20 * time.Minute, 500, keypool.Limits{RPD: 30, TPD: 5000}, keypool.Limits{}},
		{"calendar", la, 20 * time.Minute, 500, keypool.Limits{RPD: 15}, keypool.Limits{TPD: 4000}},
		{"cap", nil, time.Second, 600, keypool.Limits{RPM: 10}, keypool.Limits{RPM: 12, TPD: 3000}},
		{"all", nil, 3 * time.Second, 600, keypool.Limits{RPM: 9, TPM: 1200, RPD: 200, TPD: 20_000}, keypool.Limits{RPM: 15}},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeRedis(t)
			rs := newStore(t, f.client(t), redisstore.WithClock(f.Now))
			ms := keypool.NewMemoryStore()
			rng := rand.New(rand.NewPCG(uint64(i)+seedOffset, 42))
			type taken struct {
				t      keypool.Claim
				rg, mg keypool.Grant
			}
			var grants []taken
			models := []string{"a", "b", "c"}
			for step := range c.steps {
				f.Advance(t, time.Duration(rng.Int64N(int64(c.gap/time.Millisecond)))*time.Millisecond)
				now := f.Now()
				model := models[rng.IntN(len(models))]
				at := fmt.Sprintf("step %d at %s", step, now.Format(time.RFC3339Nano))
				op := rng.IntN(23)
				if testing.Verbose() {
					t.Logf("%s: op %d model %s", at, op, model)
				}
				switch {
				case op < 14:
					tk := keypool.Claim{Provider: "p", KeyID: "k", Model: model, Limits: c.lim, Cap: c.cap,
						DayZone: c.days, Tokens: rng.Int64N(250), Now: now, Cost: rng.Int64N(3000)}
					if rng.IntN(2) == 0 {
						tk.Budget = keypool.Budget{PerDay: 0.05, PerMonth: 0.4}
					}
					rg, err := rs.Take(t.Context(), tk)
					require.NoError(t, err)
					mg, _ := ms.Take(t.Context(), tk)
					require.Equal(t, public(mg), public(rg), "%s: take of %s", at, model)
					if rg.OK {
						grants = append(grants, taken{tk, rg, mg})
					}
				case op < 17 && len(grants) > 0:
					g := grants[rng.IntN(len(grants))]
					if op == 16 {
						require.NoError(t, g.rg.Reservation.Release(t.Context()))
						require.NoError(t, g.mg.Reservation.Release(t.Context()))
					} else {
						tokens, cost := rng.Int64N(400), rng.Int64N(4000)
						require.NoError(t, g.rg.Reservation.Settle(t.Context(), tokens, cost))
						require.NoError(t, g.mg.Reservation.Settle(t.Context(), tokens, cost))
					}
				case op >= 20:
					// What a vendor states: some limits, some counts, a reset
					// within the window or none.
					st := keypool.Stated{Provider: "p", KeyID: "k", Model: model, DayZone: c.days, Now: now,
						Used: keypool.Limits{RPM: -1, RPD: -1, TPM: -1, TPD: -1}}
					pick := func(limit int64) (int64, int64) {
						if rng.IntN(2) == 0 {
							return 0, -1
						}
						l := 1 + rng.Int64N(max(limit*2, 2))
						return l, rng.Int64N(l + 1)
					}
					st.Limits.RPM, st.Used.RPM = pick(c.lim.RPM)
					st.Limits.TPM, st.Used.TPM = pick(c.lim.TPM)
					st.Limits.RPD, st.Used.RPD = pick(c.lim.RPD)
					st.Limits.TPD, st.Used.TPD = pick(c.lim.TPD)
					if rng.IntN(2) == 0 {
						st.MinuteReset = now.Add(time.Duration(rng.Int64N(int64(time.Minute))))
						st.DayReset = now.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
					}
					require.NoError(t, rs.Learn(t.Context(), st))
					require.NoError(t, ms.Learn(t.Context(), st))
				case op < 19:
					b := keypool.Bench{Provider: "p", KeyID: "k", Model: model, AllModels: op == 18 && rng.IntN(3) == 0,
						Kind: keypool.Kind(1 + rng.IntN(4)), Level: rng.IntN(4),
						Until: now.Add(time.Duration(rng.Int64N(int64(3*c.gap/time.Millisecond))) * time.Millisecond)}
					require.NoError(t, rs.Bench(t.Context(), b))
					require.NoError(t, ms.Bench(t.Context(), b))
				default:
					b := keypool.Bench{Provider: "p", KeyID: "k", Model: model}
					require.NoError(t, rs.Bench(t.Context(), b))
					require.NoError(t, ms.Bench(t.Context(), b))
				}
				rst, err := rs.State(t.Context(), "p", "k", now)
				require.NoError(t, err)
				mst, _ := ms.State(t.Context(), "p", "k", now)
				slices.SortFunc(mst.Models, func(a, b keypool.ModelStats) int { return cmp.Compare(a.Model, b.Model) })
				require.Equal(t, mst, rst, "%s: state", at)
			}
		})
	}
}

// public returns what a grant says to its users, without the reservation
// each store keeps for itself.
func public(g keypool.Grant) keypool.Grant {
	g.Reservation = nil
	return g
}

// TestManyModelsShareOneEntry checks that a key tracks 1024 models, as the
// MemoryStore does: the rest share one more entry and its windows.
func TestManyModelsShareOneEntry(t *testing.T) {
	f := newFakeRedis(t)
	rs := newStore(t, f.client(t))
	ms := keypool.NewMemoryStore()
	lim := keypool.Limits{RPM: 1}
	for i := range 1030 {
		tk := take("k", fmt.Sprintf("model-%d", i), lim, 0, f.Now())
		rg, err := rs.Take(t.Context(), tk)
		require.NoError(t, err)
		mg, _ := ms.Take(t.Context(), tk)
		require.Equal(t, public(mg), public(rg), "take of model %d", i)
	}
	rst, err := rs.State(t.Context(), "test", "k", f.Now())
	require.NoError(t, err)
	mst, _ := ms.State(t.Context(), "test", "k", f.Now())
	require.Equal(t, len(mst.Models), len(rst.Models), "models")
	require.Equal(t, 1025, len(rst.Models), "models")
}

// seedOffset moves the parity test's seeds, to walk other random paths:
// PARITY_SEED=100 go test -run TestSameAsMemoryStore ./redisstore.
var seedOffset = func() uint64 { v, _ := strconv.ParseUint(os.Getenv("PARITY_SEED"), 10, 64); return v }()
