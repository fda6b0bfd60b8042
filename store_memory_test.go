package keypool

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemoryStoreClockSteppingBack(t *testing.T) {
	s := NewMemoryStore()
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
	s := NewMemoryStore()
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
	s := NewMemoryStore()
	ahead := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC) // a clock years ahead
	take := Claim{Provider: "p", KeyID: "k", Model: "m", Limits: Limits{RPM: 1}, Now: ahead}
	g, err := s.Take(t.Context(), take)
	require.NoError(t, err)
	require.True(t, g.OK)
	take.Now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // put right
	g, err = s.Take(t.Context(), take)
	require.NoError(t, err)
	assert.True(t, g.OK, "windows dated by a clock years ahead do not hold the key")
	assert.Equal(t, take.Now.UnixNano(), g.Reservation.(*memReservation).at)
	take.Now = take.Now.Add(time.Second)
	g, err = s.Take(t.Context(), take)
	require.NoError(t, err)
	assert.False(t, g.OK, "and count again from the corrected clock")
}
