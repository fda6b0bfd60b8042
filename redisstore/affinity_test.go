package redisstore_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/redisstore"
)

// TestAffinityAcrossReplicas: two pools, each over its own Store on one
// Redis, keep a conversation on one key, whichever of them serves it, and
// the conversation's name lives in Redis for the idle time, renewed when it
// is read.
func TestAffinityAcrossReplicas(t *testing.T) {
	c := realRedis(t)
	prefix := newPrefix(t, c)
	var mu sync.Mutex
	var served []string
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served = append(served, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		mu.Unlock()
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer vendor.Close()
	keys := []keypool.Key{{Secret: "sk-1", ID: "k1"}, {Secret: "sk-2", ID: "k2"}, {Secret: "sk-3", ID: "k3"}}
	replica := func() *http.Client {
		pool, err := keypool.New("openai", keys, keypool.WithStore(newStore(t, c, redisstore.WithPrefix(prefix))),
			keypool.WithAffinityMemory(100, 10*time.Minute))
		require.NoError(t, err)
		t.Cleanup(func() { _ = pool.Close() })
		return &http.Client{Transport: pool.Transport(nil)}
	}
	send := func(client *http.Client, conversation string) string {
		t.Helper()
		body := `{"model":"m","messages":[],"prompt_cache_key":"` + conversation + `"}`
		resp, err := client.Post(vendor.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		mu.Lock()
		defer mu.Unlock()
		return served[len(served)-1]
	}
	a, b := replica(), replica()
	send(b, "warm-up") // b's turn moves on: alone, b would send the next request elsewhere
	first := send(a, "c")
	require.Equal(t, first, send(a, "c"), "its second request here: a tells Redis")
	for range 5 {
		assert.Equal(t, first, send(b, "c"), "b follows what a recorded")
		assert.Equal(t, first, send(a, "c"))
	}
	names, err := c.Keys(t.Context(), prefix+":*:a:*").Result()
	require.NoError(t, err)
	require.Len(t, names, 1, "c's name; warm-up, a conversation of one request, costs no write")
	for _, n := range names {
		ttl, err := c.PTTL(t.Context(), n).Result()
		require.NoError(t, err)
		assert.InDelta(t, (10 * time.Minute).Seconds(), ttl.Seconds(), 5, "%s lives for the idle time", n)
		assert.NotContains(t, n, "conversation", "a conversation is named by its hash, not by what the request said")
	}
}
