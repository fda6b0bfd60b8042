package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// sentCommands is a go-redis hook that records the commands a client sends.
type sentCommands struct {
	mu   sync.Mutex
	sent []string
}

func (h *sentCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.record(cmd)
		return next(ctx, cmd)
	}
}

func (h *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.record(c)
		}
		return next(ctx, cmds)
	}
}

// record records one command, its words joined by spaces.
func (h *sentCommands) record(cmd redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	words := make([]string, 0, len(cmd.Args()))
	for _, a := range cmd.Args() {
		words = append(words, fmt.Sprint(a))
	}
	h.sent = append(h.sent, strings.Join(words, " "))
}

// since returns the commands sent from the n-th on.
func (h *sentCommands) since(n int) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.sent[min(n, len(h.sent)):]...)
}

// The idle probe, and the probes of an outage, ask the slot of the pool a
// take answered — EXISTS of a key under its hash tag, which a Cluster
// client sends to the master of that slot — not a PING, which any node of
// a Cluster answers while that master is dead. A take that Redis answered
// (no error) records the pool's slot.
func TestProbeAsksThePoolsSlot(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	hook := &sentCommands{}
	client.AddHook(hook)
	s, err := redisstore.New(client, redisstore.WithProbeEvery(20*time.Millisecond), redisstore.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	defer s.Close()
	g, err := s.Take(t.Context(), take("k", "m", keypool.Limits{RPM: 10}, 0, time.Now()))
	require.NoError(t, err)
	require.True(t, g.OK)
	after := len(hook.since(0))

	probe := "exists keypool:{test}:probe"
	require.Eventually(t, func() bool {
		for _, c := range hook.since(after) {
			if c == probe {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond, "no %q among %q", probe, hook.since(after))
	assert.NotContains(t, hook.since(after), "ping", "the probe of a store that served a pool asks its slot")
}

// A store over a Redis Cluster whose master of a pool's slot died probes
// as soon as its slot map names another node for that slot — a failover's
// new master — not a probeEvery later: while Redis is down it reloads the
// slot map every 200 ms.
func TestDownClusterProbesTheNewMasterAtOnce(t *testing.T) {
	t.Parallel() // it waits in real time, on probes
	a, b := miniredis.RunT(t), miniredis.RunT(t)
	var mu sync.Mutex
	master := a.Addr()
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: []string{a.Addr(), b.Addr()},
		ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
			mu.Lock()
			defer mu.Unlock()
			return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: master}}}}, nil
		},
		MaxRetries: -1,
	})
	t.Cleanup(func() { _ = client.Close() })
	const every = 5 * time.Second
	s, err := redisstore.New(client, redisstore.WithProbeEvery(every), redisstore.WithTimeout(200*time.Millisecond),
		redisstore.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	changes := servedAndWatched(t, s)

	a.Close() // the master dies
	_, err = s.Take(t.Context(), take("k", "m", keypool.Limits{RPM: 10}, 0, time.Now()))
	require.ErrorIs(t, err, redisstore.ErrUnavailable)
	select {
	case up := <-changes:
		require.False(t, up)
	case <-time.After(5 * time.Second):
		t.Fatal("Redis not taken as down")
	}
	time.Sleep(500 * time.Millisecond) // the election
	mu.Lock()
	master = b.Addr() // the replica takes over the slot
	mu.Unlock()
	elected := time.Now()
	select {
	case up := <-changes:
		assert.True(t, up)
		assert.Less(t, time.Since(elected), time.Second, "probed within a watch of the slot map, not a probe later (%v)", every)
	case <-time.After(2 * every):
		t.Fatal("the store did not hear the new master")
	}
	g, err := s.Take(t.Context(), take("k", "m", keypool.Limits{RPM: 10}, 0, time.Now()))
	require.NoError(t, err)
	assert.True(t, g.OK, "served by the new master")
}

// servedAndWatched makes s, closed at the end of the test, take one
// request, so that it knows its pool's slot, and returns what its
// NotifyHealth tells: whether Health is nil at each change.
func servedAndWatched(t *testing.T, s *redisstore.Store) <-chan bool {
	t.Helper()
	t.Cleanup(func() { _ = s.Close() })
	changes := make(chan bool, 4)
	t.Cleanup(s.NotifyHealth(func() { changes <- s.Health() == nil }))
	g, err := s.Take(t.Context(), take("k", "m", keypool.Limits{RPM: 10}, 0, time.Now()))
	require.NoError(t, err)
	require.True(t, g.OK)
	return changes
}
