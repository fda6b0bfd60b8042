package keypool

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A take recorded while the clock ran two hours ahead, past midnight, and
// settled once the clock is put right: the next take carried the day's
// spend back into the day that holds the right time, which no longer holds
// the take's time, so the settle neither gives back what the take reserved
// nor counts what it cost. Spent: $0.04 + $0.02; a day's $0.05 must refuse
// another $0.02.
func TestReviewSettleOfATakeFromBeforeThePutRightCountsItsCost(t *testing.T) {
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
func TestReviewCalendarDayWhereMidnightIsSkipped(t *testing.T) {
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
