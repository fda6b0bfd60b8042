package main

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// brokenStreamVendor answers every request with a stream that reports
// its usage and ends with [DONE], then drops the connection without the
// chunked body's last chunk: a vendor (or a network) that breaks at the
// end of a stream.
func brokenStreamVendor(t *testing.T) *httptest.Server {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		events := "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
			"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2,\"total_tokens\":12}}\n\n" +
			"data: [DONE]\n\n"
		fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(events), events)
		_ = buf.Flush()
		time.Sleep(50 * time.Millisecond)
		// No "0\r\n\r\n": the connection ends mid-body.
	}))
	t.Cleanup(up.Close)
	return up
}

// A budgeted client's stream that the vendor cuts at its end still
// settles the client: its request is counted, its reservation of the
// budget is settled at what the vendor reported rather than held until
// the day ends, and the request has its log line, though the reverse
// proxy ends the handler with http.ErrAbortHandler.
func TestClientStreamThatBreaksIsSettledCountedAndLogged(t *testing.T) {
	up := brokenStreamVendor(t)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 10}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: a1, secret: sk-alpha-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, srv, logs := loggedProxy(t, conf, slog.LevelInfo)
	body := `{"model":"gpt-4o-mini","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"Say hello."}]}`
	req, err := http.NewRequest(http.MethodPost, addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer kp-client-spender-00001")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
	}
	resp.Body.Close()

	// What settles, settles as the handler ends, just after the client has
	// read the answer.
	var spender clientReport
	assert.Eventually(t, func() bool {
		for _, c := range srv.current().reportClients(srv.now()) {
			if c.Name == "spender" {
				spender = c
			}
		}
		return spender.Today.Requests == 1 && len(logLines(logs, "request")) > 0
	}, 10*time.Second, 10*time.Millisecond, "the client's request is counted, and logged")
	// What the vendor reported: 10 input and 2 output tokens at $1000 and
	// $2000 a million: $0.014. The reserve was for 1000 output tokens: $2+.
	require.NotNil(t, spender.Spent)
	assert.Less(t, spender.Spent.PerDay, 0.1, "the store still holds the request's reserve of the budget")
	assert.NotEmpty(t, logLines(logs, "request"), "the request has no log line:\n%s", logs.String())
}

// A request the vendor cannot process — it answers 500 to that request
// alone, and serves every other, as vendors do for some malformed inputs —
// takes no key from the other clients: it benches one key, fails over
// once, and gets the vendor's 500; no route is benched for it.
func TestProxyPoisonRequestBenchesNoRoute(t *testing.T) {
	var served atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(b), "poison") {
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error"}}`)
			return
		}
		served.Add(1)
		io.WriteString(w, `{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`)
	}))
	t.Cleanup(up.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q, "kp-proxy-token-other-0001"]
operator_tokens: [%q]
state: %s
clients:
  - {name: hostile, token: kp-client-hostile-00001, limits: {rpm: 1}}
upstreams:
  - name: openai
    url: %s
    keys: [{id: k1, secret: sk-openai-1}, {id: k2, secret: sk-openai-2}, {id: k3, secret: sk-openai-3}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
	addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
	send := func(token, content string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":%q}]}`, content)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := send("kp-client-hostile-00001", "poison")
	t.Logf("poison: %d %s", status, cut(body, 200))
	status, body = send("kp-proxy-token-other-0001", "hello")
	assert.Equal(t, http.StatusOK, status, "another client's plain request: %s", cut(body, 300))
}

// A protocol upgrade (a WebSocket, as OpenAI's Realtime API takes at GET
// /v1/realtime) is refused at once, 501, and never asked of the vendor:
// what crosses the upgraded connection could be neither metered nor
// scanned for keys, and would hold the key's place while it lasts.
func TestProxyRefusesProtocolUpgrades(t *testing.T) {
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
	addr := serveTeam(t, nil, fmt.Sprintf(`
shutdown_timeout: 2s
upstreams:
  - name: openai
    url: %s
    keys: [{id: k1, secret: sk-openai-1}]
`, up.URL))
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/realtime?model=gpt-4o-realtime HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", proxyToken)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	require.NoError(t, err, "the proxy answers the upgrade request at once")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotImplemented, resp.StatusCode)
	assert.Contains(t, string(body), "does not forward protocol upgrades")
	assert.Zero(t, upgrades.Load(), "the vendor was asked to switch protocols")
}

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
