package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client that gives up on each request while the vendor has it is
// still held to its own rpm: the vendor got (and may count, and bill)
// each one. The library keeps a key's slot taken in that case
// (transport.noAnswer); the proxy's proxyError marks the client's call
// unanswered first thing, whatever the error, and settleClient then
// releases the client's reservation — so a client at rpm 3 that cancels
// its requests once they are upstream sends as many as it likes.
func TestRevCanceledRequestsStillCountForTheClient(t *testing.T) {
	var arrived atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		select { // a long completion, which the client does not wait for
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	t.Cleanup(up.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: capped, token: kp-client-capped-000001, limits: {rpm: 3}}
upstreams:
  - name: alpha
    url: %s
    keys: [{id: a1, secret: sk-alpha-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
	send := func(timeout time.Duration) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer kp-client-capped-000001")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for i := range 6 {
		before := arrived.Load()
		status, err := send(300 * time.Millisecond)
		if err == nil {
			require.Equal(t, http.StatusTooManyRequests, status, "request %d", i)
			continue
		}
		if arrived.Load() == before {
			t.Fatalf("request %d was canceled before it reached the vendor", i)
		}
	}
	time.Sleep(100 * time.Millisecond) // the canceled requests' handlers end
	assert.LessOrEqual(t, arrived.Load(), int64(3), "the vendor got more of the client's requests in a minute than its rpm")
}
