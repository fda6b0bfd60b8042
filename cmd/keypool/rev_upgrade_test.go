package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A client asks for a protocol upgrade (a WebSocket, as OpenAI's Realtime
// API takes at GET /v1/realtime). The proxy forwards the Upgrade header,
// the vendor switches protocols and speaks first, and modifyResponse
// then reads the 101's body — the upgraded connection — to redact it, up
// to 256 KiB: the handler hangs until the vendor hangs up (a Realtime
// session lasts up to 30 minutes), the client never gets an answer, the
// key's in-flight place stays taken, and a shutdown waits out its
// shutdown_timeout and saves nothing. The upgraded stream could be
// neither metered nor scanned for keys anyway: the proxy should not ask
// the vendor for an upgrade, and answer the client promptly.
func TestRevUpgradeIsNotForwarded(t *testing.T) {
	var upgrades atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"expected a websocket","type":"invalid_request_error"}}`)
			return
		}
		upgrades.Add(1)
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		buf.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n{\"type\":\"session.created\"}\n")
		_ = buf.Flush()
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, _ = buf.ReadString('\n') // the session waits for the client
	}))
	t.Cleanup(up.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
shutdown_timeout: 2s
upstreams:
  - name: openai
    url: %s
    keys: [{id: k1, secret: sk-openai-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/realtime?model=gpt-4o-realtime HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", proxyToken)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "the proxy never answered the upgrade request")
	resp.Body.Close()
	assert.NotEqual(t, http.StatusSwitchingProtocols, resp.StatusCode)
	assert.Zero(t, upgrades.Load(), "the vendor was asked to switch protocols")
}
