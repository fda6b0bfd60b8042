package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keypool-go/keypool/internal/vendorsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serveTeam serves conf — its clients and upstreams, below a proxy token, an
// operator token and a state of its own — on clock (nil: one standing at
// 2026-03-10 12:00 UTC), and returns its address.
func serveTeam(t *testing.T, clock *testClock, conf string) string {
	t.Helper()
	if clock == nil {
		clock = newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	}
	head := fmt.Sprintf("proxy_tokens: [%q]\noperator_tokens: [%q]\nstate: %s\n", proxyToken, operatorToken, t.TempDir())
	addr, _ := serveServer(t, clocked(t, head+conf, clock))
	return addr
}

// streamBody asks for a stream of gpt-4o-mini without its usage.
const streamBody = `{"model":"gpt-4o-mini","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`

// A client that gives up on each request while the vendor has it is
// still held to its own rpm: the vendor got (and may count, and bill)
// each one, and the client's take stands, as a key's does
// (transport.noAnswer).
func TestClientCancelledRequestsStillCount(t *testing.T) {
	var arrived atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.Add(1)
		select { // a long completion, which the client does not wait for
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	t.Cleanup(up.Close)
	addr := serveTeam(t, nil, fmt.Sprintf(`
clients:
  - {name: capped, token: kp-client-capped-000001, limits: {rpm: 3}}
upstreams:
  - name: alpha
    url: %s
    keys: [{id: a1, secret: sk-alpha-1}]
`, up.URL))
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
	assert.LessOrEqual(t, arrived.Load(), int64(3), "the vendor got more of the client's requests in a minute than its rpm")
}

// A budgeted client's request that one key refuses (429, settled at zero)
// and the next serves as a stream without usage (OpenAI without
// stream_options.include_usage) costs the client its reserve: the success
// forgets the refusal's zero.
func TestClientFailoverThenStreamWithoutUsageIsNotFree(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer sk-busy-1" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	addr := serveTeam(t, nil, fmt.Sprintf(`
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 10}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: busy, secret: sk-busy-1}, {id: free, secret: sk-free-1}]
`, up.URL))
	a := clientPost(t, addr, "kp-client-spender-00001", "", `{"model":"gpt-4o-mini","stream":true,"max_tokens":1000,"messages":[{"role":"user","content":"Say hello."}]}`)
	require.Equal(t, http.StatusOK, a.status)
	spender := clientsOf(t, addr)["spender"]
	require.NotNil(t, spender.Spent)
	t.Logf("the store counts $%.4f for a stream served after a failover", spender.Spent.PerDay)
	assert.Positive(t, spender.Spent.PerDay, "a served stream cost the client nothing")
}

// OpenAI reports no usage in a stream unless the request asks for it
// (stream_options.include_usage), and most clients do not. Such a request
// of a budgeted client is spent at its reserve, not held as if it were
// still in flight until the day ends: once they fill the budget, the next
// request is refused until the next day, not a second at a time all day.
func TestClientStreamsWithoutUsageSpendTheBudget(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC))
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-alpha-1", ID: "a1"}}})
	t.Cleanup(sim.Close)
	addr := serveTeam(t, clock, fmt.Sprintf(`
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 0.5}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: a1, secret: sk-alpha-1}]
`, sim.URL()))
	send := func() (int, string, string) {
		a := clientPost(t, addr, "kp-client-spender-00001", "", streamBody)
		return a.status, a.retryAfter, a.body
	}
	served := 0
	var status int
	var retryAfter, body string
	for range 20 {
		if status, retryAfter, body = send(); status != http.StatusOK {
			break
		}
		served++
	}
	require.Positive(t, served)
	require.Equal(t, http.StatusTooManyRequests, status, body)
	// The last stream settles as its handler returns, just after the
	// client has read it; then nothing is in flight.
	assert.Eventually(t, func() bool {
		status, retryAfter, body = send()
		return retryAfter == "3600"
	}, 10*time.Second, 10*time.Millisecond, "no request is in flight: the budget is spent until midnight UTC, not held for a second (last: %d Retry-After %s: %s)", status, retryAfter, cut(body, 300))
}

// The key's side of the same: a key with a budget whose streams report no
// usage spends each one's reserve (meteredBody.settleFor), so that once
// they fill its budget clients are told the next day, not a second away
// all day while no request is in flight.
func TestKeyStreamsWithoutUsageSpendTheBudget(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC))
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-alpha-1", ID: "a1"}}})
	t.Cleanup(sim.Close)
	addr := serveTeam(t, clock, fmt.Sprintf(`
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: a1, secret: sk-alpha-1, budget: {per_day: 0.5}}]
`, sim.URL()))
	send := func() (int, string, string) {
		a := clientPost(t, addr, proxyToken, "", streamBody)
		return a.status, a.retryAfter, a.body
	}
	served := 0
	for range 20 {
		if status, _, _ := send(); status != http.StatusOK {
			break
		}
		served++
	}
	require.Positive(t, served)
	// The last stream settles as its handler returns, just after the
	// client has read it; then nothing is in flight.
	var status int
	var retryAfter, body string
	assert.Eventually(t, func() bool {
		status, retryAfter, body = send()
		return status == http.StatusTooManyRequests && retryAfter == "3600"
	}, 10*time.Second, 10*time.Millisecond, "no request is in flight: the key's budget is spent until midnight UTC (last: %d Retry-After %s: %s)", status, retryAfter, cut(body, 300))
}

// A client held to models: [gpt-4o-mini] that names it at the start of a
// body longer than the 1 MiB read for other clients' rules
// (maxClientScan), and names gpt-4o again after it, is refused: a vendor's
// JSON parser (Go's, Python's) takes the last key, so the proxy reads such
// a client's body whole (within max_request_body) and sends nothing.
func TestClientModelsHoldPastTheScannedHead(t *testing.T) {
	var mu sync.Mutex
	var models []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model string `json:"model"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		mu.Lock()
		models = append(models, req.Model)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":1,"total_tokens":11}}`, req.Model)
	}))
	t.Cleanup(up.Close)
	addr := serveTeam(t, nil, fmt.Sprintf(`
clients:
  - {name: narrow, token: kp-client-narrow-000001, models: [gpt-4o-mini]}
upstreams:
  - name: alpha
    url: %s
    keys: [{id: a1, secret: sk-alpha-1}]
`, up.URL))
	filler := strings.Repeat("x", maxClientScan+1024)
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":%q}],"model":"gpt-4o"}`, filler)
	a := clientPost(t, addr, "kp-client-narrow-000001", "", body)
	mu.Lock()
	defer mu.Unlock()
	assert.NotContains(t, models, "gpt-4o", "the vendor was asked for a model the client may not use (%d: %s)", a.status, cut(a.body, 200))
	assert.Equal(t, http.StatusForbidden, a.status)
}

// OpenAI's "n" asks for n completions of up to max_tokens each, and bills
// their output together: a budget's reserve counts n times max_tokens (and
// Gemini's candidateCount likewise), so that a client with $0.05 a day
// asking for n: 8 of max_tokens 1000 ($0.128 at most) is refused before
// anything is sent, and a settle counts all the output the vendor reports.
func TestClientBudgetCountsNCompletions(t *testing.T) {
	var billed float64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			N         int   `json:"n"`
			MaxTokens int64 `json:"max_tokens"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req)
		n := max(req.N, 1)
		out := int64(n) * req.MaxTokens
		billed += float64(10*1000+out*16) / 1e6
		w.Header().Set("Content-Type", "application/json")
		var choices []string
		for i := range n {
			choices = append(choices, fmt.Sprintf(`{"index":%d,"message":{"role":"assistant","content":"..."},"finish_reason":"length"}`, i))
		}
		fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[%s],"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`,
			strings.Join(choices, ","), out, 10+out)
	}))
	t.Cleanup(up.Close)
	addr := serveTeam(t, nil, fmt.Sprintf(`
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 0.05}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 16}}
    keys: [{id: a1, secret: sk-alpha-1}]
`, up.URL))
	a := clientPost(t, addr, "kp-client-spender-00001", "", `{"model":"gpt-4o-mini","n":8,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`)
	spender := clientsOf(t, addr)["spender"]
	require.NotNil(t, spender.Spent)
	t.Logf("status %d; the vendor billed $%.4f; the store counts $%.4f of the client's $0.05", a.status, billed, spender.Spent.PerDay)
	assert.Equal(t, http.StatusTooManyRequests, a.status, "8 completions of 1,000 tokens do not fit the budget")
	assert.LessOrEqual(t, billed, 0.05, "the vendor billed past the client's daily budget in one request")
	assert.InDelta(t, billed, spender.Spent.PerDay, 1e-6, "what the store counts against the budget is what the vendor billed")
}

// A budgeted client reserves what its request can cost at most at the
// price of its model in any upstream the client reaches — the dearest for
// this request, by its input and its output bound, not by the prices' sum:
// a prompt of about 10,000 tokens with max_tokens 1, served by an upstream
// of dear input and cheap output, is refused with 429 before anything is
// sent when that reserve does not fit the client's $0.05 a day.
func TestClientReserveAtTheDearestCostForTheRequest(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	first := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-first-1", ID: "f1"}}})
	second := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-second-1", ID: "s1"}}})
	t.Cleanup(first.Close)
	t.Cleanup(second.Close)
	addr := serveTeam(t, clock, fmt.Sprintf(`
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 0.05}}
upstreams:
  - name: first
    url: %s
    prices: {gpt-4o-mini: {input: 10, output: 1}}
    keys: [{id: f1, secret: sk-first-1}]
  - name: second
    url: %s
    prices: {gpt-4o-mini: {input: 1, output: 20}}
    keys: [{id: s1, secret: sk-second-1}]
`, first.URL(), second.URL()))
	prompt := strings.Repeat("word ", 8000) // about 10,000 tokens
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":1,"messages":[{"role":"user","content":%q}]}`, prompt)
	a := clientPost(t, addr, "kp-client-spender-00001", "", body)
	spender := clientsOf(t, addr)["spender"]
	require.NotNil(t, spender.Spent)
	t.Logf("status %d, spent today $%.4f of $0.05", a.status, spender.Spent.PerDay)
	assert.LessOrEqual(t, spender.Spent.PerDay, 0.05, "one request took the client past its daily budget (%d: %s)", a.status, cut(a.body, 200))
	assert.Equal(t, http.StatusTooManyRequests, a.status, "a request whose reserve at the upstream that would serve it does not fit the budget")
}

// A client with a budget and no minute limit refused because its request
// in flight holds what is left of its budget — one without max_tokens
// reserves all of it — is told so, and to retry in a second: not that it
// reached a per-minute limit it does not have.
func TestClientRefusedByItsRequestInFlightIsToldSo(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(up.Close)
	addr := serveTeam(t, nil, fmt.Sprintf(`
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 1}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1, output: 2}}
    keys: [{id: a1, secret: sk-alpha-1}, {id: a2, secret: sk-alpha-2}]
`, up.URL))
	send := func() (*http.Response, error) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer kp-client-spender-00001")
		return http.DefaultClient.Do(req)
	}
	first := make(chan struct{})
	go func() {
		defer close(first)
		if resp, err := send(); err == nil {
			_ = resp.Body.Close()
		}
	}()
	<-arrived
	resp, err := send()
	close(release)
	<-first
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(b), "client spender has reached its budget, which its requests in flight hold")
}

// A model's max_output is what it writes in one completion: a request for
// n completions reserves n of them, with or without max_tokens, so that a
// client with $0.05 a day asking for n: 8 of a model whose max_output is
// 1000 ($0.138 at most) is refused before anything is sent, and a settle
// counts all n.
func TestClientBudgetCountsNCompletionsUnderMaxOutput(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"max_tokens at max_output", `{"model":"gpt-4o-mini","n":8,"max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`},
		{"no max_tokens", `{"model":"gpt-4o-mini","n":8,"messages":[{"role":"user","content":"hi"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var billed float64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					N int `json:"n"`
				}
				b, _ := io.ReadAll(r.Body)
				_ = json.Unmarshal(b, &req)
				n := max(req.N, 1)
				out := int64(n) * 1000 // each completion writes the model's max_output
				billed += float64(10*1000+out*16) / 1e6
				w.Header().Set("Content-Type", "application/json")
				var choices []string
				for i := range n {
					choices = append(choices, fmt.Sprintf(`{"index":%d,"message":{"role":"assistant","content":"..."},"finish_reason":"length"}`, i))
				}
				fmt.Fprintf(w, `{"id":"c1","object":"chat.completion","model":"gpt-4o-mini","choices":[%s],"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}`,
					strings.Join(choices, ","), out, 10+out)
			}))
			t.Cleanup(up.Close)
			conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: spender, token: kp-client-spender-00001, budget: {per_day: 0.05}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 16, max_output: 1000}}
    keys: [{id: a1, secret: sk-alpha-1}]
`, proxyToken, operatorToken, t.TempDir(), up.URL)
			addr, _ := serveServer(t, clocked(t, conf, newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))))
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer kp-client-spender-00001")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			spender := clientsOf(t, addr)["spender"]
			require.NotNil(t, spender.Spent)
			t.Logf("status %d; the vendor billed $%.4f; the store counts $%.4f of the client's $0.05", resp.StatusCode, billed, spender.Spent.PerDay)
			assert.LessOrEqual(t, billed, 0.05, "the vendor billed past the client's daily budget in one request")
			assert.InDelta(t, billed, spender.Spent.PerDay, 1e-6, "what the store counts against the budget is what the vendor billed")
		})
	}
}
