package redisstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

// TestScriptFlushed checks that a store carries on when Redis forgets its
// script (a restart, a failover, SCRIPT FLUSH), with adjustments waiting
// that a take carries: they still count before the take.
func TestScriptFlushed(t *testing.T) {
	f := newFakeRedis(t)
	c := f.client(t)
	s := newStore(t, c)
	lim := keypool.Limits{TPM: 100}
	first := take("k", "m", lim, 90, f.Now())
	g, err := s.Take(t.Context(), first)
	require.NoError(t, err)
	require.True(t, g.OK)
	require.NoError(t, g.Reservation.Settle(t.Context(), 10, 0))
	require.NoError(t, c.ScriptFlush(t.Context()).Err())
	g, err = s.Take(t.Context(), take("k", "m", lim, 90, f.Now()))
	require.NoError(t, err)
	assert.True(t, g.OK, "10 + 90 <= 100: the settle carried by the take counted first")
	st, err := s.State(t.Context(), "test", "k", time.Time{})
	require.NoError(t, err)
	assert.Equal(t, int64(100), st.Models[0].Usage.MinuteTokens)
}
