package keypool

import (
	"fmt"
	"net/http"
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
