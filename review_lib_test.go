package keypool

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// TestAffinityPinnedChainOnAPaidKeyStaysThere: a response made on a paid
// key (the free key's minute was full) is kept by the paid key's
// organisation only; the next turn naming it must go back to the paid key,
// not to the free key that has room again, which refuses it 400
// previous_response_not_found.
func TestAffinityPinnedChainOnAPaidKeyStaysThere(t *testing.T) {
	clock := newTestClock()
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "free", Limits: Limits{RPM: 1}}, {Secret: "paid", Paid: true}}
	pool, err := New("openai", keys, WithClock(clock.Now))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	status, _ := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"warm"}`)
	require.Equal(t, http.StatusOK, status)
	status, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, []string{"free", "paid"}, v.Served(0))

	clock.Advance(time.Minute + windowspec.ExactGuard) // the free key has room again
	status, _ = respond(t, client, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
	assert.Equal(t, http.StatusOK, status, "the turn reaches the key that made %s: served %v", id, v.Served(0))
}

// TestAffinityOneOffNamesDoNotEvictResponseChains: requests that each name
// a conversation of their own (a new X-Session-Id each time — a client
// naming every request anew, or one flooding the pool) must not push out
// the response IDs the vendor keeps for one organisation: the next turn of
// a Responses chain made before them still reaches the key that made it.
func TestAffinityOneOffNamesDoNotEvictResponseChains(t *testing.T) {
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "k1"}, {Secret: "k2"}, {Secret: "k3"}, {Secret: "k4"}}
	pool, err := New("openai", keys, WithClock(newTestClock().Now), WithAffinityMemory(64, time.Hour))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	status, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	require.Equal(t, http.StatusOK, status)
	for i := range 64 {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-5","messages":[]}`))
		req.Header.Set("X-Session-Id", fmt.Sprintf("one-off-%d", i))
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	for i := range 3 {
		var status int
		status, id = respond(t, client, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
		require.Equal(t, http.StatusOK, status, "turn %d reaches the key that made the chain: served %v", i, v.Served(0)[65:])
	}
}
