package redisstore_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// Issue 36: a Redis key of the wrong type under one of a pool's keys (here
// its minute window, a string) passes that key over — every request is
// served by the other key — and Health names it, until the Redis key is
// gone and a take of the key succeeds again.
func TestWrongTypeKeyPassedOver(t *testing.T) {
	clients := map[string]func(t *testing.T) redis.UniversalClient{
		"miniredis":    func(t *testing.T) redis.UniversalClient { return newFakeRedis(t).client(t) },
		"redis-server": func(t *testing.T) redis.UniversalClient { return realRedis(t) },
	}
	for name, client := range clients {
		t.Run(name, func(t *testing.T) {
			c := client(t)
			prefix := newPrefix(t, c)
			s := newStore(t, c, redisstore.WithPrefix(prefix))
			bad := prefix + ":{test}:wm:a:m"
			require.NoError(t, c.Set(t.Context(), bad, "not a hash", 0).Err())

			served := map[string]int{}
			vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				served[r.Header.Get("Authorization")]++
				w.WriteHeader(http.StatusOK)
			}))
			defer vendor.Close()
			pool, err := keypool.New("test", []keypool.Key{{ID: "a", Secret: "sk-a"}, {ID: "b", Secret: "sk-b"}},
				keypool.WithStore(s), keypool.WithLimits(keypool.Limits{RPM: 100}))
			require.NoError(t, err)
			defer pool.Close()
			hc := &http.Client{Transport: pool.Transport(nil)}
			for i := range 12 {
				req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, vendor.URL, strings.NewReader(`{"model":"m"}`))
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				require.NoError(t, err, "request %d", i)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
			}
			assert.Equal(t, map[string]int{"Bearer sk-b": 12}, served, "the requests each key served")

			h := s.Health()
			require.Error(t, h, "Health with a key passed over")
			assert.Contains(t, h.Error(), `key "a" of "test" passed over`)
			assert.Contains(t, h.Error(), bad+" is a string")
			assert.NotContains(t, h.Error(), `"b"`)

			require.NoError(t, c.Del(context.Background(), bad).Err())
			g, err := s.Take(t.Context(), keypool.Claim{Provider: "test", KeyID: "a", Model: "m",
				Limits: keypool.Limits{RPM: 100}, Now: time.Now()})
			require.NoError(t, err)
			assert.True(t, g.OK, "a take once the Redis key is gone")
			assert.NoError(t, s.Health(), "Health once the key's take succeeds")
		})
	}
}
