package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// curl --http2 on an http:// URL (and other clients that offer h2c)
// sends "Upgrade: h2c" with an ordinary HTTP/1.1 request, which a server
// may ignore (RFC 9110 7.8) and answer as HTTP/1.1. The proxy does not
// speak h2c: it should answer the request as it is, not refuse it 501 as
// if it were a WebSocket.
func TestProxyIgnoresAnOfferedH2CUpgrade(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"}]}`)
	}))
	t.Cleanup(up.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
upstreams:
  - name: openai
    url: %s
    keys: [{id: k1, secret: sk-openai-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n", proxyToken)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
}
