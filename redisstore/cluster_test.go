package redisstore_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
	"github.com/keypool-go/keypool/storetest"
)

// clusterEnv names the environment variable that gives the tests a real
// Redis Cluster: its nodes' addresses, comma-separated
// ("127.0.0.1:7101,127.0.0.1:7102,…"). CI sets it.
const clusterEnv = "KEYPOOL_REDIS_CLUSTER_ADDRS"

// realCluster returns a Cluster client of the Redis Cluster clusterEnv
// names, closed at the end of the test, or skips the test when it is not
// set.
func realCluster(t testing.TB) (*redis.ClusterClient, []string) {
	t.Helper()
	v := os.Getenv(clusterEnv)
	if v == "" {
		t.Skip("no Redis Cluster: set " + clusterEnv + " to its nodes' addresses (.ci/run starts one)")
	}
	addrs := strings.Split(v, ",")
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.ForEachShard(t.Context(), func(ctx context.Context, n *redis.Client) error {
		return n.Ping(ctx).Err()
	}), "the Redis Cluster at %s=%s", clusterEnv, v)
	return c, addrs
}

// clusterNode starts a redis-server for one test as a Cluster of one node
// that holds every slot, stopped at its end, or skips the test when none is
// on the PATH.
func clusterNode(t *testing.T) *redisServer {
	t.Helper()
	dir := t.TempDir()
	r, err := startRedis(dir, 0, "--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf")
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("no redis-server on the PATH")
	}
	require.NoError(t, err)
	t.Cleanup(r.stop)
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	defer c.Close()
	require.NoError(t, c.Do(t.Context(), "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err())
	require.Eventually(t, func() bool {
		info, err := c.ClusterInfo(t.Context()).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	}, 10*time.Second, 20*time.Millisecond, "the node's cluster_state")
	return r
}

// The Cluster URL form opens a Cluster client, over which a take is
// taken; the plain form opens a plain client.
func TestOpenClusterURL(t *testing.T) {
	t.Parallel() // it waits on servers and timeouts, in real time
	node := clusterNode(t)
	url := "redis://" + node.addr + "?addr=" + node.addr
	require.True(t, redisstore.IsClusterURL(url))
	s, err := redisstore.Open(url, redisstore.WithPrefix(newPrefix(t, redis.NewClient(&redis.Options{Addr: node.addr}))))
	require.NoError(t, err)
	defer s.Close()
	assert.True(t, s.Cluster(), "Open(%q).Cluster()", url)
	g, err := s.Take(t.Context(), take("k", "m", keypool.Limits{RPM: 1}, 0, time.Now()))
	require.NoError(t, err)
	assert.True(t, g.OK, "a take over the Cluster client")

	plain := realRedis(t)
	addr := plain.Options().Addr
	require.False(t, redisstore.IsClusterURL("redis://"+addr+"/0"))
	s2, err := redisstore.Open("redis://" + addr + "/0")
	require.NoError(t, err)
	defer s2.Close()
	assert.False(t, s2.Cluster(), "Open(plain URL).Cluster()")
}

// A plain client of a Cluster node is refused at the start, in one line
// that says the address is a Cluster node, with or without local windows
// to fall back on.
func TestPlainClientOfClusterNodeRefused(t *testing.T) {
	t.Parallel() // it waits on servers and timeouts, in real time
	node := clusterNode(t)
	for _, opts := range [][]redisstore.Option{nil, {redisstore.WithLocalFallback(2)}} {
		_, err := redisstore.Open("redis://"+node.addr+"/0", opts...)
		require.Error(t, err)
		msg := err.Error()
		assert.Contains(t, msg, node.addr+" is a Redis Cluster node")
		assert.Contains(t, msg, "?addr=")
		assert.NotContains(t, msg, "\n")
		assert.False(t, errors.Is(err, redisstore.ErrUnavailable), "%q is not an outage", msg)

		c := redis.NewClient(&redis.Options{Addr: node.addr})
		_, err = redisstore.New(c, opts...)
		_ = c.Close()
		require.Error(t, err)
		assert.Contains(t, err.Error(), "is a Redis Cluster node")
	}
}

func TestConformanceRedisCluster(t *testing.T) {
	c, _ := realCluster(t)
	t.Run("ServerClock", func(t *testing.T) { storetest.Run(t, realHarness(t, c)) })
	t.Run("TestClock", func(t *testing.T) { storetest.Run(t, clockHarness(c)) })
}

// TestSameAsMemoryStoreRedisCluster holds the store on a real Redis
// Cluster to the MemoryStore's answers, as TestSameAsMemoryStore does on
// miniredis, on a clock the test moves.
func TestSameAsMemoryStoreRedisCluster(t *testing.T) {
	c, _ := realCluster(t)
	storetest.Parity(t, clockHarness(c))
}
