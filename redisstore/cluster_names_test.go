package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// A pool named "" — keypool.New takes it — keeps its keys under one hash
// tag on Redis Cluster as any other does: "{}" is no hash tag to Redis,
// which would place each key by its whole name, in slots of their own, and
// refuse every script with CROSSSLOT.
func TestClusterEmptyProviderKeepsOneSlot(t *testing.T) {
	node := clusterNode(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{node.addr}})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, redisstore.WithPrefix(newPrefix(t, redis.NewClient(&redis.Options{Addr: node.addr}))))
	claim := take("k", "m", keypool.Limits{RPM: 1}, 0, time.Now())
	claim.Provider = ""
	g, err := s.Take(t.Context(), claim)
	require.NoError(t, err)
	assert.True(t, g.OK, "a take of the pool named \"\" over the Cluster client")
	require.NoError(t, s.Bench(t.Context(), keypool.Bench{KeyID: "k", Model: "m", Kind: keypool.KindRate, Until: time.Now().Add(time.Minute)}))
	_, err = s.State(t.Context(), "", "k", time.Now())
	require.NoError(t, err)
}
