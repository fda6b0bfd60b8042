package redisstore_test

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// A take carries the adjustments waiting in its own EVALSHA: one that
// fails there — its key's window turned to the wrong type — fails alone
// and is reported, while the take and the other adjustments it carries
// count; and the batch is sent again by EVAL when Redis has forgotten the
// script.
func TestBatchCallsFailAlone(t *testing.T) {
	clients := map[string]func(t *testing.T) redis.UniversalClient{
		"miniredis":    func(t *testing.T) redis.UniversalClient { return newFakeRedis(t).client(t) },
		"redis-server": func(t *testing.T) redis.UniversalClient { return realRedis(t) },
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			c := client(t)
			prefix := newPrefix(t, c)
			var logs bytes.Buffer
			s := newStore(t, c, redisstore.WithPrefix(prefix),
				redisstore.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			lim := keypool.Limits{RPM: 100, TPM: 10_000}
			now := time.Now()
			ga, err := s.Take(t.Context(), take("a", "m", lim, 1000, now))
			require.NoError(t, err)
			gb, err := s.Take(t.Context(), take("b", "m", lim, 1000, now))
			require.NoError(t, err)
			require.True(t, ga.OK && gb.OK)
			require.NoError(t, c.Del(t.Context(), prefix+":{test}:wm:a:m").Err())
			require.NoError(t, c.Set(t.Context(), prefix+":{test}:wm:a:m", "not a hash", 0).Err())
			require.NoError(t, ga.Reservation.Settle(t.Context(), 10, 0))
			require.NoError(t, gb.Reservation.Settle(t.Context(), 10, 0))
			require.NoError(t, c.ScriptFlush(t.Context()).Err())

			g, err := s.Take(t.Context(), take("b", "m", lim, 500, now))
			require.NoError(t, err)
			assert.True(t, g.OK, "the take that carried a failing adjustment")
			assert.Contains(t, logs.String(), "dropped 1 adjustments")
			assert.Contains(t, logs.String(), "WRONGTYPE")
			st, err := s.State(t.Context(), "test", "b", now)
			require.NoError(t, err)
			require.Len(t, st.Models, 1)
			assert.Equal(t, int64(2), st.Models[0].Usage.MinuteRequests, "b's takes")
			assert.Equal(t, int64(510), st.Models[0].Usage.MinuteTokens, "b's settle carried beside the one that failed, and its take")
		})
	}
}
