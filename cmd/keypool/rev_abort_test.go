package main

import (
	"bufio"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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
// the day ends, and the request has its log line. Today the reverse
// proxy panics with http.ErrAbortHandler on the copy error, and forward's
// settleClient (deferred only after ServeHTTP returns) and
// logRequests's line never run.
func TestRevAbortedStreamSettlesClient(t *testing.T) {
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

	time.Sleep(300 * time.Millisecond) // what settles, settles as the answer ends
	var spender clientReport
	for _, c := range srv.current().reportClients(srv.now()) {
		if c.Name == "spender" {
			spender = c
		}
	}
	assert.Equal(t, int64(1), spender.Today.Requests, "the client's request is counted")
	// What the vendor reported: 10 input and 2 output tokens at $1000 and
	// $2000 a million: $0.014. The reserve was for 1000 output tokens: $2+.
	require.NotNil(t, spender.Spent)
	assert.Less(t, spender.Spent.PerDay, 0.1, "the store still holds the request's reserve of the budget")
	assert.NotEmpty(t, logLines(logs, "request"), "the request has no log line:\n%s", logs.String())
}
