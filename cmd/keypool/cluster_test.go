package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

// clusterNode starts a redis-server as a Redis Cluster of one node that
// holds every slot; the test's end stops it.
func clusterNode(t *testing.T) *redisServer {
	t.Helper()
	dir := t.TempDir()
	rs := startRedis(t, 0, dir, "--cluster-enabled", "yes", "--cluster-config-file", dir+"/nodes.conf")
	require.Equal(t, "+OK", rs.call("CLUSTER", "ADDSLOTSRANGE", "0", "16383"))
	// A GET of a missing key answers nil once the node serves its slots;
	// CLUSTERDOWN until then.
	require.Eventually(t, func() bool { return rs.call("GET", "{p}") == "$-1" }, 10*time.Second, 20*time.Millisecond,
		"the node does not serve its slots")
	return rs
}

// Issue 36: state in the Cluster URL form opens a Cluster client — check
// says so, and serve serves through it — and a plain URL naming a Cluster
// node stops check and serve, with or without replicas, in one line that
// says the address is a Cluster node.
func TestStateRedisCluster(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	rs := clusterNode(t)
	v := newStateVendor(t)

	clusterURL := "redis://" + rs.addr() + "?addr=" + rs.addr()
	path := writeConfig(t, stateConfig(v, clusterURL, ""), nil)
	status, stdout, stderr := runCommand(t, nil, "check", "-config", path)
	require.Equal(t, 0, status, stderr)
	assert.True(t, strings.HasSuffix(stdout, "state in "+clusterURL+" (Redis Cluster)\n"), stdout)

	base, _ := startProxy(t, stateConfig(v, clusterURL, ""))
	for range 3 {
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}

	plain := "redis://" + rs.addr() + "/0"
	for _, more := range []string{"", "replicas: 2\n"} {
		path := writeConfig(t, stateConfig(v, plain, anyPort+more), nil)
		for _, cmd := range []string{"check", "serve"} {
			status, _, stderr := runCommand(t, nil, cmd, "-config", path)
			assert.Equal(t, exitUsage, status, "%s with %q: %s", cmd, more, stderr)
			got := lines(stderr)
			require.NotEmpty(t, got, "%s with %q", cmd, more)
			line := got[len(got)-1]
			assert.Contains(t, line, "state: redisstore: "+rs.addr()+" is a Redis Cluster node", "%s with %q", cmd, more)
			assert.Contains(t, line, "?addr=", "%s with %q", cmd, more)
		}
	}
}

// failingTakes is a store whose takes fail with the store's own error.
type failingTakes struct{ keypool.Store }

func (failingTakes) Take(context.Context, keypool.Claim) (keypool.Grant, error) {
	return keypool.Grant{}, errors.New("redisstore: the store broke")
}

func (failingTakes) Close() error { return nil }

// Issue 36: a store's error reaches the client once prefixed, as
// "keypool: up: store: …", never "keypool: keypool: …".
func TestStoreErrorNamedOnce(t *testing.T) {
	v := newStateVendor(t)
	addr, stop := serveWithStore(t, stateConfig(v, "unused", ""), failingTakes{keypool.NewMemoryStore()})
	defer stop()
	resp, err := chat(t, "http://"+addr, false)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Contains(t, string(body), `"keypool: up: store: redisstore: the store broke"`)
	assert.NotContains(t, string(body), "keypool: keypool:")
}
