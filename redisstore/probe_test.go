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
		h.mu.Lock()
		words := make([]string, 0, len(cmd.Args()))
		for _, a := range cmd.Args() {
			words = append(words, fmt.Sprint(a))
		}
		h.sent = append(h.sent, strings.Join(words, " "))
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (h *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
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
