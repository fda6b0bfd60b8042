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

// A take a full key counted in the entry the models beyond the bound share
// is released there, even when its model has had an entry of its own made
// since (an idle model gave way to it): the release changes the windows
// the take counted in, as the MemoryStore's does, not the model's new
// ones.
func TestReleaseOfAnOverflowTakeAfterItsModelGotAnEntry(t *testing.T) {
	c := realRedis(t)
	// Start on a bucket's edge: both takes of "x" fall in one 750 ms bucket.
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Truncate(750 * time.Millisecond)
	clk := storetest.NewClock(start.Add(400 * time.Millisecond))
	s := newStore(t, c, redisstore.WithPrefix(newPrefix(t, c)), redisstore.WithServerClock(clk.Now), redisstore.WithClock(clk.Now))
	lim := keypool.Limits{RPM: 100} // counted in buckets
	for i := range keypool.MaxModelsPerKey {
		g, err := s.Take(t.Context(), take("k", fmt.Sprintf("m%d", i), lim, 0, clk.Now()))
		require.NoError(t, err)
		require.True(t, g.OK)
	}
	// 60.75 s on, the models' windows are about to let their takes go: a
	// new model still shares the overflow entry.
	clk.Advance(t, 81*750*time.Millisecond-350*time.Millisecond)
	first, err := s.Take(t.Context(), take("k", "x", lim, 0, clk.Now()))
	require.NoError(t, err)
	require.True(t, first.OK)
	clk.Advance(t, 400*time.Millisecond) // the others are idle now; still the same bucket
	var second keypool.Grant
	for range 64 { // each take looks at 32 entries for an idle one
		second, err = s.Take(t.Context(), take("k", "x", lim, 0, clk.Now()))
		require.NoError(t, err)
		require.True(t, second.OK)
		st, err := s.State(t.Context(), "test", "k", clk.Now())
		require.NoError(t, err)
		if modelOf(st, "x") != nil {
			break
		}
		require.NoError(t, second.Reservation.Release(t.Context()))
	}
	st, err := s.State(t.Context(), "test", "k", clk.Now())
	require.NoError(t, err)
	require.NotNil(t, modelOf(st, "x"), "x has an entry of its own")
	require.Equal(t, int64(1), modelOf(st, "x").Usage.MinuteRequests)

	require.NoError(t, first.Reservation.Release(t.Context()))
	require.NoError(t, s.Flush(t.Context()))
	st, err = s.State(t.Context(), "test", "k", clk.Now())
	require.NoError(t, err)
	assert.Equal(t, int64(1), modelOf(st, "x").Usage.MinuteRequests, "x's own window still counts its second take, in flight")
	if o := modelOf(st, keypool.OverflowModel); o != nil {
		assert.Zero(t, o.Usage.MinuteRequests, "the overflow entry no longer counts the released take")
	}
}

func modelOf(st keypool.KeyStats, model string) *keypool.ModelStats {
	for i := range st.Models {
		if st.Models[i].Model == model {
			return &st.Models[i]
		}
	}
	return nil
}
