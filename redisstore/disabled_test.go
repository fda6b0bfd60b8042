package redisstore_test

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// A key disabled while Redis is down, with the local fallback, is out in
// Redis once it answers again; while it is down, Disabled says so rather
// than answering from the local store, which knows only the outage's
// changes — a pool then keeps what it knew.
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

	r.down(t)
	eventually(t, "the store reports the outage", func() bool { return len(st.get()) >= 1 })
	_, err := s.Disabled(ctx, "test")
	require.Error(t, err, "no answer from the local store alone")
	require.NoError(t, s.SetDisabled(ctx, "test", "during", &keypool.Disabled{By: "night shift", At: at}))

	r.up(t)
	eventually(t, "the store reports Redis back", func() bool { return len(st.get()) == 2 })
	eventually(t, "the outage's change reaches Redis", func() bool {
		got, err := newStore(t, c).Disabled(ctx, "test")
		return err == nil && got["during"].By == "night shift" && got["before"].By == "ops"
	})
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
