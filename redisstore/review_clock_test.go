package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
	"github.com/keypool-go/keypool/storetest"
)

// The overflow model's entry is never written by a take (take script:
// "if m ~= ARGV[2] and hold - busy > REFRESH"), so its busy stays 0, and a
// shift DELetes the overflow model's windows though they count takes in
// force. The MemoryStore moves them back and keeps refusing.
func TestReviewShiftKeepsOverflowWindows(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			right := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			clk := storetest.NewClock(right.Add(24 * time.Hour)) // a day ahead
			c := open(t)
			rs := newStore(t, c, redisstore.WithPrefix(newPrefix(t, c)),
				redisstore.WithServerClock(clk.Now), redisstore.WithClock(clk.Now))
			ms := keypool.NewMemoryStore()
			stores := map[string]keypool.Store{"redis": rs, "memory": ms}
			// Fill the key with 1024 models, each with a take in force.
			for i := range 1024 {
				for _, s := range stores {
					g, err := s.Take(t.Context(), take("k", fmt.Sprintf("m%d", i), keypool.Limits{RPM: 1000}, 0, clk.Now()))
					require.NoError(t, err)
					require.True(t, g.OK)
				}
			}
			lim := keypool.Limits{RPM: 2}
			for i := range 2 {
				for sn, s := range stores {
					g, err := s.Take(t.Context(), take("k", fmt.Sprintf("extra%d", i), lim, 0, clk.Now()))
					require.NoError(t, err)
					require.True(t, g.OK, "%s: overflow take %d", sn, i)
				}
			}
			for sn, s := range stores {
				g, err := s.Take(t.Context(), take("k", "extra9", lim, 0, clk.Now()))
				require.NoError(t, err)
				require.False(t, g.OK, "%s: the overflow minute is full while ahead", sn)
			}
			clk.Advance(t, -24*time.Hour+5*time.Second) // put right
			for sn, s := range stores {
				g, err := s.Take(t.Context(), take("k", "extra9", lim, 0, clk.Now()))
				require.NoError(t, err)
				assert.False(t, g.OK, "%s: the overflow minute still holds its two takes after the put right", sn)
			}
		})
	}
}

// The Redis store's form of the same: the server ran two hours ahead, past
// midnight; a take from then settles after it is put right, and after a
// take that carried the day's spend back.
func TestReviewSettleAfterServerClockPutRightCountsItsCost(t *testing.T) {
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			right := time.Date(2026, 3, 1, 22, 30, 0, 0, time.UTC)
			pool := storetest.NewClock(right)
			srv := storetest.NewClock(right.Add(2 * time.Hour))
			c := open(t)
			s := newStore(t, c, redisstore.WithPrefix(newPrefix(t, c)),
				redisstore.WithServerClock(srv.Now), redisstore.WithClock(pool.Now))
			claim := func(cost int64) keypool.Claim {
				cl := take("k", "m", keypool.Limits{}, 0, pool.Now())
				cl.Budget, cl.Cost = keypool.Budget{PerDay: 0.05}, cost
				return cl
			}
			a, err := s.Take(t.Context(), claim(10_000))
			require.NoError(t, err)
			require.True(t, a.OK)
			srv.Advance(t, -2*time.Hour+5*time.Second) // put right
			pool.Advance(t, 5*time.Second)
			b, err := s.Take(t.Context(), claim(20_000))
			require.NoError(t, err)
			require.True(t, b.OK)
			require.NoError(t, a.Reservation.Settle(t.Context(), 0, 40_000))
			require.NoError(t, b.Reservation.Settle(t.Context(), 0, 20_000))
			st, err := s.State(t.Context(), "test", "k", pool.Now()) // sends the settles
			require.NoError(t, err)
			assert.InDelta(t, 0.06, st.Spent.PerDay, 1e-9, "the day's spend: both takes' costs")
			g, err := s.Take(t.Context(), claim(20_000))
			require.NoError(t, err)
			assert.False(t, g.OK, "$0.06 spent: no $0.02 more within $0.05 a day")
		})
	}
}

// The Redis store's form of the calendar day whose midnight the clocks
// skip (America/Havana, 2026-03-08): a calendar RPD of 1 admits one.
func TestReviewRedisCalendarDayWhereMidnightIsSkipped(t *testing.T) {
	havana, err := time.LoadLocation("America/Havana")
	require.NoError(t, err)
	for name, open := range clockRedises {
		t.Run(name, func(t *testing.T) {
			clk := storetest.NewClock(time.Date(2026, 3, 8, 12, 0, 0, 0, havana))
			c := open(t)
			s := newStore(t, c, redisstore.WithPrefix(newPrefix(t, c)),
				redisstore.WithServerClock(clk.Now), redisstore.WithClock(clk.Now))
			served := 0
			for range 3 {
				cl := take("k", "m", keypool.Limits{RPD: 1}, 0, clk.Now())
				cl.DayZone = havana
				g, err := s.Take(t.Context(), cl)
				require.NoError(t, err)
				if g.OK {
					served++
				}
			}
			assert.Equal(t, 1, served, "a calendar day of RPD 1")
		})
	}
}
