package redisstore_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// While Redis is down, Disabled answers with what Redis last said and the
// changes made since — so that a pool made during the outage, as a reload
// makes one, keeps the keys out — and a change made during the outage is
// in Redis once it answers again, however many benches the outage's
// journal dropped.
func TestDisabledDuringAnOutage(t *testing.T) {
	r := miniServer{miniredis.RunT(t)}
	c := redis.NewClient(&redis.Options{Addr: r.addr()})
	t.Cleanup(func() { _ = c.Close() })
	var st statuses
	s := newStore(t, c, redisstore.WithLocalFallback(2), redisstore.WithLogger(st.logger()),
		redisstore.WithProbeEvery(probeEvery))
	ctx := t.Context()
	at := time.Now().UTC().Truncate(time.Millisecond)
	require.NoError(t, s.SetDisabled(ctx, "test", "before", &keypool.Disabled{By: "ops", At: at}))
	_, err := s.Disabled(ctx, "test")
	require.NoError(t, err)
	fresh := newStore(t, c)

	r.down(t)
	eventually(t, "the store reports the outage", func() bool { return len(st.get()) >= 1 })
	_, err = fresh.Disabled(ctx, "test")
	require.Error(t, err, "a store that never read them has nothing to answer with")
	require.NoError(t, s.SetDisabled(ctx, "test", "during", &keypool.Disabled{By: "night shift", At: at}))
	got, err := s.Disabled(ctx, "test")
	require.NoError(t, err)
	assert.Equal(t, []string{"before", "during"}, slices.Sorted(maps.Keys(got)))
	pool, err := keypool.New("test", []keypool.Key{{Secret: "sk-1", ID: "before"}, {Secret: "sk-2", ID: "other"}},
		keypool.WithStore(s))
	require.NoError(t, err)
	for _, ks := range pool.Stats() {
		assert.Equal(t, ks.ID == "before", ks.Disabled != nil, "a pool made during the outage: %s", ks.ID)
	}
	for i := range 5000 { // more than the journal keeps
		require.NoError(t, s.Bench(ctx, keypool.Bench{Provider: "test", KeyID: fmt.Sprintf("k%d", i), Model: "m",
			Kind: keypool.KindRate, Until: time.Now().Add(time.Minute)}))
	}

	r.up(t)
	eventually(t, "the store reports Redis back", func() bool { return len(st.get()) == 2 })
	_, err = s.Disabled(ctx, "test") // writes what the outage kept
	require.NoError(t, err)
	got, err = fresh.Disabled(ctx, "test")
	require.NoError(t, err)
	assert.Equal(t, "night shift", got["during"].By, "the outage's change is in Redis")
	assert.Equal(t, "ops", got["before"].By)
}

// A value in Redis the store cannot read keeps its key out of rotation:
// whoever wrote the field meant the key out.
func TestDisabledUnreadableValue(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c)
	ctx := t.Context()
	require.NoError(t, s.SetDisabled(ctx, "test", "k", &keypool.Disabled{By: "ops", At: time.UnixMilli(1_700_000_000_000)}))
	keys := m.Keys()
	require.Len(t, keys, 1)
	assert.Equal(t, "keypool:{test}:d", keys[0])
	assert.Equal(t, "1700000000000 ops", m.HGet(keys[0], "k"))
	for _, v := range []string{"", "soon ops", "-5 ops", "12"} {
		m.HSet(keys[0], "k", v)
		got, err := s.Disabled(ctx, "test")
		require.NoError(t, err)
		require.Contains(t, got, "k", "%q", v)
		assert.Equal(t, "(an unreadable value in Redis)", got["k"].By, "%q", v)
	}
}
