package redisstore_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
	"github.com/keypool-go/keypool/redisstore"
)

// maxEvalshaPerRequest is what a request may cost Redis: its take, and a
// tenth of a call more for what no take carried.
const maxEvalshaPerRequest = 1.1

// Issue 36: a vendor that states its limits on every answer (OpenAI's
// x-ratelimit-* headers) costs Redis no call of its own. Each answer's
// statement and settle ride in the next take's EVALSHA, or, when no take
// comes, in one EVALSHA of the store's goroutine: EVALSHA calls per
// request, as the server counts them (INFO commandstats), stay at or below
// 1.1 — with one request at a time, with requests a few milliseconds
// or a tenth of a second apart, and with many at once.
func TestEvalshaPerRequest(t *testing.T) {
	t.Parallel() // it waits on servers and timeouts, in real time
	srv := ownRedis(t)
	cases := []struct {
		name     string
		clients  int
		requests int // per client
		pause    time.Duration
	}{
		{"one at a time", 1, 300, 0},
		{"one at a time, 5 ms apart", 1, 100, 5 * time.Millisecond},
		{"one at a time, 100 ms apart", 1, 20, 100 * time.Millisecond},
		{"32 at once", 32, 40, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{Addr: srv.addr})
			defer rdb.Close()
			keys := []vendorsim.Key{{Secret: "sk-a", ID: "a", Limits: vendorsim.Limits{RPM: 1e6, TPM: 1e9}},
				{Secret: "sk-b", ID: "b", Limits: vendorsim.Limits{RPM: 1e6, TPM: 1e9}}}
			sim := vendorsim.Start(vendorsim.Config{Keys: keys})
			defer sim.Close()
			s, err := redisstore.New(rdb, redisstore.WithPrefix(newPrefix(t, rdb)))
			require.NoError(t, err)
			defer s.Close()
			p, err := keypool.New("openai", []keypool.Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}},
				keypool.WithStore(s), keypool.WithLimits(keypool.Limits{RPM: 1e6, TPM: 1e9}))
			require.NoError(t, err)
			defer p.Close()
			client := &http.Client{Transport: p.Transport(nil)}

			require.NoError(t, rdb.ConfigResetStat(t.Context()).Err())
			var wg sync.WaitGroup
			for range c.clients {
				wg.Go(func() {
					for range c.requests {
						req, err := http.NewRequest(http.MethodPost, sim.URL()+"/v1/chat/completions",
							strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`))
						if !assert.NoError(t, err) {
							return
						}
						resp, err := client.Do(req)
						if !assert.NoError(t, err) {
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						assert.Equal(t, http.StatusOK, resp.StatusCode)
						time.Sleep(c.pause)
					}
				})
			}
			wg.Wait()
			require.NoError(t, p.Close())
			require.NoError(t, s.Flush(t.Context()))
			requests := c.clients * c.requests
			calls := evalshaCalls(t, rdb)
			ratio := float64(calls) / float64(requests)
			t.Logf("%s: %d EVALSHA for %d requests: %.3f a request", c.name, calls, requests, ratio)
			assert.LessOrEqual(t, ratio, maxEvalshaPerRequest, "EVALSHA per request")
			st, _ := sim.StatsOf("a")
			st2, _ := sim.StatsOf("b")
			assert.Equal(t, int64(requests), st.Served+st2.Served, "requests the vendor served")
		})
	}
}

// evalshaCalls returns the EVALSHA and EVAL calls the server counted.
func evalshaCalls(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		v, err := strconv.ParseInt(calls, 10, 64)
		require.NoError(t, err, "%q", line)
		n += v
	}
	return n
}
