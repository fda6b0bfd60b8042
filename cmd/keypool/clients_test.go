package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// The clients of the client tests, by name, with their tokens.
var clientTokens = map[string]string{
	"capped":  "kp-client-capped-000001",
	"narrow":  "kp-client-narrow-000001",
	"expired": "kp-client-expired-00001",
	"spender": "kp-client-spender-00001",
	"tagger":  "kp-client-tagger-000001",
	"metered": "kp-client-metered-00001",
}

// clientsConfig is a proxy with a client of each kind in front of two
// fake vendors, alpha (first) and beta, whose one key takes a request a
// day.
func clientsConfig(alpha, beta, state string) string {
	return fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
clients:
  - {name: capped, token: %s, limits: {rpm: 5}}
  - {name: narrow, token: %s, models: [gpt-4o-mini], routes: [beta]}
  - {name: expired, token: %s, expires: "2026-03-01T00:00:00Z"}
  - {name: spender, token: %s, budget: {per_day: 0.45}}
  - {name: tagger, token: %s}
  - {name: metered, token: %s, limits: {tpm: 150}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: a1, secret: sk-alpha-1}]
  - name: beta
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: b1, secret: sk-beta-1, limits: {rpd: 1}}]
`, proxyToken, operatorToken, state, clientTokens["capped"], clientTokens["narrow"], clientTokens["expired"],
		clientTokens["spender"], clientTokens["tagger"], clientTokens["metered"], alpha, beta)
}

// clientsProxy starts the two fake vendors and the proxy of clientsConfig
// on the clock, and returns the proxy's address and the vendors.
func clientsProxy(t *testing.T, clock *testClock) (addr string, alpha, beta *vendorsim.Server, srv *server) {
	t.Helper()
	alpha = vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-alpha-1", ID: "a1"}}})
	beta = vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.now, Keys: []vendorsim.Key{{Secret: "sk-beta-1", ID: "b1"}}})
	t.Cleanup(alpha.Close)
	t.Cleanup(beta.Close)
	addr, srv = serveServer(t, clocked(t, clientsConfig(alpha.URL(), beta.URL(), t.TempDir()), clock))
	return addr, alpha, beta, srv
}

// clientAnswer is what the proxy answered a client.
type clientAnswer struct {
	status     int
	retryAfter string
	body       string
}

// clientSend sends a chat request for model with token, and the tag when
// it is not "", and reads the answer whole (its usage settles).
func clientSend(t *testing.T, addr, token, model, tag string) clientAnswer {
	t.Helper()
	return clientPost(t, addr, token, tag, fmt.Sprintf(`{"model":%q,"max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`, model))
}

// clientPost posts body to the proxy's chat completions with token, and
// the tag when it is not "", and reads the answer whole (its usage
// settles, a stream to its end).
func clientPost(t *testing.T, addr, token, tag, body string) clientAnswer {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	if tag != "" {
		req.Header.Set(tagHeader, tag)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return clientAnswer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
}

// servedBy returns the requests the vendors served, together.
func servedBy(sims ...*vendorsim.Server) int64 {
	var n int64
	for _, s := range sims {
		n += s.Totals().Served
	}
	return n
}

// clientsOf returns the clients /status shows the operator, by name.
func clientsOf(t *testing.T, addr string) map[string]clientReport {
	t.Helper()
	status, body := get(t, "http://"+addr+"/status", nil, http.Header{"Authorization": {"Bearer " + operatorToken}})
	require.Equal(t, http.StatusOK, status, body)
	var report statusReport
	require.NoError(t, json.Unmarshal([]byte(body), &report))
	out := map[string]clientReport{}
	for _, c := range report.Clients {
		out[c.Name] = c
	}
	return out
}

// A client at rpm 5 sending 8 requests has 5 served and 3 refused with 429,
// a Retry-After and a body that says the limit is the client's own; the
// vendors saw 5. A minute on, its window has room again.
func TestClientOwnLimitRefusesBeforeAnyKey(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	addr, alpha, beta, _ := clientsProxy(t, clock)
	var ok, refused int
	for i := range 8 {
		a := clientSend(t, addr, clientTokens["capped"], "gpt-4o-mini", "")
		switch a.status {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
			refused++
			secs, err := strconv.Atoi(a.retryAfter)
			require.NoError(t, err, "request %d: Retry-After %q", i, a.retryAfter)
			assert.True(t, secs >= 1 && secs <= 61, "request %d: Retry-After %d, want within the minute", i, secs)
			assert.Contains(t, a.body, `"type":"rate_limit_error"`)
			assert.Contains(t, a.body, "client capped has reached its per-minute limit")
			assert.Contains(t, a.body, "the client's own limit, not the vendor's")
			assert.Contains(t, a.body, `"limit":"client"`)
		default:
			t.Fatalf("request %d: status %d: %s", i, a.status, a.body)
		}
	}
	assert.Equal(t, 5, ok, "served")
	assert.Equal(t, 3, refused, "refused by the client's limit")
	assert.Equal(t, int64(5), servedBy(alpha, beta), "what the vendors served")
	assert.Equal(t, http.StatusOK, clientSend(t, addr, proxyToken, "gpt-4o-mini", "").status, "a proxy token is a client without limits")

	clock.set(clock.now().Add(61 * time.Second))
	assert.Equal(t, http.StatusOK, clientSend(t, addr, clientTokens["capped"], "gpt-4o-mini", "").status, "a minute on")
	c := clientsOf(t, addr)["capped"]
	assert.Equal(t, int64(6), c.Today.Requests, "capped's requests served today")
	assert.Positive(t, c.Today.Tokens)
	assert.Positive(t, c.Today.Spend)
}

// A model outside a client's list is refused with 403 naming it, and
// nothing is sent; a model in it goes only to the client's routes, and
// when they cannot take it the client waits rather than reach another.
func TestClientModelsAndRoutes(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	addr, alpha, beta, _ := clientsProxy(t, clock)
	a := clientSend(t, addr, clientTokens["narrow"], "gpt-4o", "")
	assert.Equal(t, http.StatusForbidden, a.status, a.body)
	assert.Contains(t, a.body, `"type":"permission_error"`)
	assert.Contains(t, a.body, `client narrow may not use the model \"gpt-4o\"`)
	assert.Equal(t, int64(0), alpha.Totals().Requests+beta.Totals().Requests, "nothing sent")

	assert.Equal(t, http.StatusOK, clientSend(t, addr, clientTokens["narrow"], "gpt-4o-mini", "").status)
	assert.Equal(t, int64(0), alpha.Totals().Requests, "alpha is first, but not narrow's")
	assert.Equal(t, int64(1), beta.Totals().Served)
	a = clientSend(t, addr, clientTokens["narrow"], "gpt-4o-mini", "")
	assert.Equal(t, http.StatusTooManyRequests, a.status, "beta's key took its one request of the day: %s", a.body)
	assert.NotEmpty(t, a.retryAfter)
	assert.Equal(t, int64(0), alpha.Totals().Requests, "alpha had room, and is still not narrow's")
	assert.Equal(t, http.StatusOK, clientSend(t, addr, proxyToken, "gpt-4o", "").status, "a proxy token reaches every route and model")
	assert.Equal(t, int64(1), alpha.Totals().Served)
}

// A client's token past its expiry is refused with 401 saying so, and
// nothing is sent.
func TestClientTokenExpires(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	addr, alpha, beta, _ := clientsProxy(t, clock)
	a := clientSend(t, addr, clientTokens["expired"], "gpt-4o-mini", "")
	assert.Equal(t, http.StatusUnauthorized, a.status)
	assert.Contains(t, a.body, "the token of client expired expired at 2026-03-01T00:00:00Z")
	assert.Equal(t, int64(0), alpha.Totals().Requests+beta.Totals().Requests, "nothing sent")
}

// A client's token reads none of the operator's endpoints — /status,
// /metrics, the page's data, unbench — and an operator's reads /status
// with the clients in it.
func TestClientTokenIsNoOperator(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	addr, _, _, _ := clientsProxy(t, clock)
	bearer := http.Header{"Authorization": {"Bearer " + clientTokens["tagger"]}}
	for _, path := range []string{"/status", "/metrics"} {
		status, body := get(t, "http://"+addr+path, nil, bearer)
		assert.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, status, "%s with a client's token: %s", path, body)
		assert.NotContains(t, body, "capped", "%s named a client", path)
	}
	status, body := sendWith(t, http.MethodPost, "http://"+addr+"/keys/alpha/a1/unbench", nil, bearer)
	assert.Contains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, status, "unbench with a client's token: %s", body)
	clock.set(clock.now().Add(time.Minute)) // past the pause the wrong tokens earned this address
	status, body = sendWith(t, http.MethodPost, "http://"+addr+"/keys/alpha/a1/unbench", nil, http.Header{"Authorization": {"Bearer " + operatorToken}})
	assert.Equal(t, http.StatusOK, status, "unbench with an operator token: %s", body)
	clients := clientsOf(t, addr)
	for name := range clientTokens {
		assert.Contains(t, clients, name, "/status names every client")
	}
	assert.Equal(t, &keypool.Limits{RPM: 5}, clients["capped"].Limits)
}

// A client's budget a day refuses its requests, with 429 and a Retry-After
// to the next day (UTC), once what it spent leaves no room for one more's
// reserve; the next day it has room again.
func TestClientBudgetPerDay(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC))
	addr, alpha, beta, _ := clientsProxy(t, clock)
	// The requests the budget admits: each reserves its estimated input
	// and its max_tokens, and spends what the vendor reports (spendCost).
	body := `{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`
	info := keypool.ReadRequest("/v1/chat/completions", []byte(body))
	reserve, _ := keypool.Price{Input: 1000, Output: 2000}.Reserve(info, keypool.DefaultEstimate(info))
	want, spent := 0, 0.0
	for spent+float64(reserve)/1e6 <= 0.45 {
		want++
		spent += spendCost
	}
	require.Greater(t, want, 1)
	ok := 0
	var last clientAnswer
	for range 20 {
		if last = clientSend(t, addr, clientTokens["spender"], "gpt-4o-mini", ""); last.status != http.StatusOK {
			break
		}
		ok++
	}
	assert.Equal(t, want, ok, "requests the budget admitted")
	assert.Equal(t, int64(want), servedBy(alpha, beta))
	require.Equal(t, http.StatusTooManyRequests, last.status, last.body)
	assert.Equal(t, "3600", last.retryAfter, "Retry-After: to midnight UTC")
	assert.Contains(t, last.body, "client spender has reached its daily limit or its budget")
	assert.Contains(t, last.body, `"retry_at":"2026-03-11T00:00:00Z"`)
	spender := clientsOf(t, addr)["spender"]
	assert.InDelta(t, spent, spender.Today.Spend, 1e-6, "spend today, in /status")
	require.NotNil(t, spender.Spent, "the store's spend of a client with a budget")
	assert.InDelta(t, spent, spender.Spent.PerDay, 1e-6, "the store's spend today: settled at what the vendor reported (each reserve was %v)", float64(reserve)/1e6)

	clock.set(time.Date(2026, 3, 11, 0, 0, 1, 0, time.UTC))
	assert.Equal(t, http.StatusOK, clientSend(t, addr, clientTokens["spender"], "gpt-4o-mini", "").status, "the next day")
}

// keypool status shows each client with rules, or with use this month,
// and its tags: requests, tokens and spend today and this month, a
// budget's spend against it.
func TestClientStatusCommand(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	addr, _, _, _ := clientsProxy(t, clock)
	require.Equal(t, http.StatusOK, clientSend(t, addr, clientTokens["spender"], "gpt-4o-mini", "nightly").status)
	var out strings.Builder
	require.NoError(t, runStatus(t.Context(), []string{"-url", "http://" + addr, "-token", operatorToken}, &out, io.Discard))
	spend := strconv.FormatFloat(spendCost, 'f', 2, 64)
	assert.Regexp(t, `\nCLIENT\s+TODAY\s+THIS MONTH\n`, out.String())
	assert.Regexp(t, `\nspender\s+1 request, \d+ tokens, `+spend+` of 0\.45 USD\s+1 request, \d+ tokens, `+spend+` USD\n  tag nightly\s+1 request`, out.String())
	assert.Regexp(t, `\ncapped\s+0 requests, 0 tokens, 0\.00 USD`, out.String(), "a client with rules, unused")
	assert.NotContains(t, out.String(), "proxy_tokens[0]", "a proxy token unused this month")
}

// A client's token windows take each request's estimate, then settle it
// at what the answer reported, as a key's do: at tpm 150, a request
// estimated at 68 tokens that used 86 leaves no room for a second (the
// estimates alone would have let it in).
func TestClientTokenWindowSettles(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	addr, alpha, beta, _ := clientsProxy(t, clock)
	body := `{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`
	info := keypool.ReadRequest("/v1/chat/completions", []byte(body))
	require.Equal(t, int64(68), keypool.DefaultEstimate(info), "the estimate this test is written for")
	require.Equal(t, http.StatusOK, clientSend(t, addr, clientTokens["metered"], "gpt-4o-mini", "").status)
	a := clientSend(t, addr, clientTokens["metered"], "gpt-4o-mini", "")
	assert.Equal(t, http.StatusTooManyRequests, a.status, a.body)
	assert.Contains(t, a.body, "client metered has reached its per-minute limit")
	assert.Equal(t, int64(1), servedBy(alpha, beta))
	assert.Equal(t, int64(len(body)/4+64), clientsOf(t, addr)["metered"].Today.Tokens, "what the answer reported: its body's length / 4 and max_tokens")
}

// A request's tag counts its use apart in /status and the metrics, and
// never goes upstream; a client's tags are bounded, the rest counted as
// "other"; a tag that is not one is refused; the request log names the
// client and the tag.
func TestClientTags(t *testing.T) {
	var mu sync.Mutex
	var tagsSeen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tagsSeen = append(tagsSeen, r.Header.Values(tagHeader)...)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
	}))
	t.Cleanup(upstream.Close)
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	s := clocked(t, clientsConfig(upstream.URL, upstream.URL+"/beta", t.TempDir()), clock)
	var logs syncBuffer
	srv, err := newServer(s, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	addr := ln.Addr().String()

	tagger := clientTokens["tagger"]
	for range 2 {
		require.Equal(t, http.StatusOK, clientSend(t, addr, tagger, "gpt-4o-mini", "batch-nightly").status)
	}
	require.Equal(t, http.StatusOK, clientSend(t, addr, tagger, "gpt-4o-mini", "").status)
	for i := range maxTagsPerClient + 3 {
		require.Equal(t, http.StatusOK, clientSend(t, addr, tagger, "gpt-4o-mini", fmt.Sprintf("t%d", i)).status)
	}
	a := clientSend(t, addr, tagger, "gpt-4o-mini", "no spaces allowed")
	assert.Equal(t, http.StatusBadRequest, a.status)
	assert.Contains(t, a.body, "X-Keypool-Tag is not a tag")
	assert.Equal(t, http.StatusBadRequest, clientSend(t, addr, tagger, "gpt-4o-mini", strings.Repeat("x", maxTagLength+1)).status, "a tag too long")
	mu.Lock()
	assert.Empty(t, tagsSeen, "the tag header went upstream")
	mu.Unlock()

	c := clientsOf(t, addr)["tagger"]
	assert.Equal(t, int64(3+maxTagsPerClient+3), c.Today.Requests)
	assert.Equal(t, 15*c.Today.Requests, c.Today.Tokens, "tokens as the answers reported them")
	tags := map[string]tagReport{}
	for _, tg := range c.Tags {
		tags[tg.Tag] = tg
	}
	assert.Len(t, tags, maxTagsPerClient+1, "tags counted apart, and other")
	assert.Equal(t, int64(2), tags["batch-nightly"].Today.Requests)
	assert.Equal(t, int64(2), tags["batch-nightly"].Month.Requests)
	assert.Equal(t, int64(4), tags[otherTag].Today.Requests, "the tags beyond the bound")

	status, metrics := get(t, "http://"+addr+"/metrics", nil, http.Header{"Authorization": {"Bearer " + operatorToken}})
	require.Equal(t, http.StatusOK, status)
	assert.Contains(t, metrics, `keypool_client_requests_total{client="tagger",otel_scope_name="github.com/keypool-go/keypool/cmd/keypool"`)
	assert.Regexp(t, `keypool_client_requests_total\{client="tagger",.*tag="batch-nightly"\} 2`, metrics)
	assert.Regexp(t, `keypool_client_requests_total\{client="tagger",.*tag="other"\} 4`, metrics)
	assert.Regexp(t, `msg=request .*client=tagger tag=batch-nightly`, logs.String())
	assert.NotContains(t, logs.String(), tagger, "a client's token reached the log")
}

// Every mistake in a client's entry is named by its field.
func TestConfigClients(t *testing.T) {
	up := "upstreams:\n  - {name: up, url: 'https://x', keys: [{secret: sk-s}]}\n  - {name: priced, url: 'https://y', prices: {m: {input: 1}}, keys: [{secret: sk-t}]}\n"
	for _, tc := range []struct{ name, clients, want string }{
		{"no name", "[{token: kp-client-token-1}]", "clients[0].name: missing"},
		{"bad name", "[{name: 'a b', token: kp-client-token-1}]", `clients[0].name: "a b" is not a name`},
		{"long name", "[{name: " + strings.Repeat("a", maxClientName+1) + ", token: kp-client-token-1}]", "clients[0].name:"},
		{"same name", "[{name: a, token: kp-client-token-1}, {name: a, token: kp-client-token-2}]", `clients[1].name: "a" also names clients[0]`},
		{"no token", "[{name: a}]", "clients[0].token: missing"},
		{"token from a missing variable", "[{name: a, token: 'env:NOPE_CLIENT'}]", "clients[0].token: NOPE_CLIENT is not set"},
		{"same token as a client", "[{name: a, token: kp-client-token-1}, {name: b, token: kp-client-token-1}]", "clients[1].token: the same token as clients[0].token"},
		{"same token as a proxy token", "[{name: a, token: kp-proxy-token-for-tests}]", "clients[0].token: the same token as proxy_tokens[0]"},
		{"same token as an operator", "[{name: a, token: op-operator-token-for-tests}]", "clients[0].token: the same token as operator_tokens[0]"},
		{"negative rpm", "[{name: a, token: kp-client-token-1, limits: {rpm: -1}}]", "clients[0].limits.rpm: -1 is negative"},
		{"in_flight", "[{name: a, token: kp-client-token-1, limits: {in_flight: 2}}]", "clients[0].limits.in_flight: not a client's limit"},
		{"negative budget", "[{name: a, token: kp-client-token-1, budget: {per_day: -1}}]", "clients[0].budget.per_day: -1 is negative"},
		{"budget without prices", "[{name: a, token: kp-client-token-1, routes: [up], budget: {per_day: 1}}]", "clients[0].budget: no upstream the client reaches has prices"},
		{"unknown route", "[{name: a, token: kp-client-token-1, routes: [nowhere]}]", `clients[0].routes[0]: "nowhere" names no upstream`},
		{"route twice", "[{name: a, token: kp-client-token-1, routes: [up, up]}]", `clients[0].routes[1]: "up" is listed twice`},
		{"empty model", "[{name: a, token: kp-client-token-1, models: ['']}]", "clients[0].models[0]: empty"},
		{"model twice", "[{name: a, token: kp-client-token-1, models: [m, m]}]", `clients[0].models[1]: "m" is listed twice`},
		{"bad expires", "[{name: a, token: kp-client-token-1, expires: tomorrow}]", `clients[0].expires: "tomorrow" is not a time`},
		{"unknown field", "[{name: a, token: kp-client-token-1, limit: {rpm: 1}}]", "clients[0].limit: unknown field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := fmt.Sprintf("proxy_tokens: [%q]\noperator_tokens: [%q]\nclients: %s\n%s", proxyToken, operatorToken, tc.clients, up)
			c, err := parseConfig([]byte(conf), "keypool.yaml")
			if err == nil {
				_, err = c.resolve(func(string) (string, bool) { return "", false })
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("fine", func(t *testing.T) {
		conf := "clients:\n  - {name: team-a.1, token: kp-client-token-1, limits: {rpm: 5, tpd: 1000}, budget: {per_month: 20}, models: [m], routes: [priced], expires: '2027-01-01T00:00:00Z'}\n" + up
		c, err := parseConfig([]byte(conf), "keypool.yaml")
		require.NoError(t, err)
		s, err := c.resolve(func(string) (string, bool) { return "", false })
		require.NoError(t, err, "clients without proxy_tokens")
		require.Len(t, s.clients, 1)
		got := s.clients[0]
		assert.Equal(t, "team-a.1", got.name)
		assert.Equal(t, keypool.Limits{RPM: 5, TPD: 1000}, got.limits)
		assert.Equal(t, keypool.Budget{PerMonth: 20}, got.budget)
		assert.Equal(t, []string{"priced"}, got.routes)
		assert.Equal(t, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), got.expires)
		assert.True(t, bytes.Equal([]byte("kp-client-token-1"), got.token))
		assert.Contains(t, s.warnings, "operator_tokens is not set, nor proxy_tokens: no token may read /status, /metrics and the status page, nor unbench keys (a client's never does); give operators tokens of their own in operator_tokens")
	})
}

// sharedRedis returns the state of replicas that share one Redis: the
// real Redis of $KEYPOOL_REDIS_ADDR (as CI runs it), in its database 15,
// emptied before and after the test, whose Lua scripts are the ones a
// fleet runs; else a miniredis.
func sharedRedis(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("KEYPOOL_REDIS_ADDR")
	if addr == "" {
		return "redis://" + miniredis.RunT(t).Addr() + "/0"
	}
	const db = 15
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	require.NoError(t, c.FlushDB(t.Context()).Err(), "KEYPOOL_REDIS_ADDR=%s", addr)
	t.Cleanup(func() {
		_ = c.FlushDB(context.Background()).Err()
		_ = c.Close()
	})
	return fmt.Sprintf("redis://%s/%d", addr, db)
}

// Two replicas sharing one Redis hold one client budget between them: a
// client sending through both at once, eight requests at a time, spends
// no more than its budget by the overruns of the answers in flight when
// it filled (each answer's use beyond its reserve), the bound a key's
// budget keeps; and either replica's /status shows the spend both made.
func TestClientBudgetAcrossReplicas(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{{Secret: "sk-alpha-1", ID: "a1"}}})
	t.Cleanup(sim.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
replicas: 2
clients:
  - {name: spender, token: %s, budget: {per_day: 0.45}}
upstreams:
  - name: alpha
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys: [{id: a1, secret: sk-alpha-1}]
`, proxyToken, operatorToken, sharedRedis(t), clientTokens["spender"], sim.URL())
	first, _ := startProxy(t, conf)
	second, _ := startProxy(t, conf)
	body := `{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`
	info := keypool.ReadRequest("/v1/chat/completions", []byte(body))
	reserve, _ := keypool.Price{Input: 1000, Output: 2000}.Reserve(info, keypool.DefaultEstimate(info))
	const senders = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range senders {
		wg.Go(func() {
			addr := strings.TrimPrefix(first, "http://")
			if i%2 == 1 {
				addr = strings.TrimPrefix(second, "http://")
			}
			for range 5 {
				a := clientSend(t, addr, clientTokens["spender"], "gpt-4o-mini", "")
				mu.Lock()
				statuses[a.status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	ok := statuses[http.StatusOK]
	assert.Equal(t, senders*5, ok+statuses[http.StatusTooManyRequests], "answers other than 200 and 429: %v", statuses)
	assert.GreaterOrEqual(t, ok, 2, "the budget holds two requests' reserves at once")
	spent := float64(ok) * spendCost
	overrun := spendCost - float64(reserve)/1e6
	assert.LessOrEqual(t, spent, 0.45+senders*overrun+1e-9, "%d served: spend %.3f over the budget by more than %d overruns", ok, spent, senders)
	assert.Equal(t, int64(ok), sim.Totals().Served)
	for _, base := range []string{first, second} {
		c := clientsOf(t, strings.TrimPrefix(base, "http://"))["spender"]
		require.NotNil(t, c.Spent)
		assert.InDelta(t, spent, c.Spent.PerDay, 1e-6, "the shared spend, as %s shows it", base)
	}
}
