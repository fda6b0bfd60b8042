package vendorsim_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

func TestNewRejectsBadConfig(t *testing.T) {
	ok := vendorsim.Key{Secret: "k1"}
	tests := []struct {
		name string
		cfg  vendorsim.Config
		want string
	}{
		{"no keys", vendorsim.Config{}, "no keys"},
		{"unknown dialect", vendorsim.Config{Dialect: "cohere", Keys: []vendorsim.Key{ok}}, "unknown dialect"},
		{"no secret", vendorsim.Config{Keys: []vendorsim.Key{{ID: "a"}}}, "no secret"},
		{"same secret", vendorsim.Config{Keys: []vendorsim.Key{ok, {Secret: "k1", ID: "other"}}}, "repeats a secret"},
		{"same ID", vendorsim.Config{Keys: []vendorsim.Key{{Secret: "a", ID: "x"}, {Secret: "b", ID: "x"}}}, "repeats the ID"},
		{"ID equal to a default ID", vendorsim.Config{Keys: []vendorsim.Key{{Secret: "a"}, {Secret: "b", ID: "a"}}}, "repeats the ID"},
		{"negative limit", vendorsim.Config{Keys: []vendorsim.Key{{Secret: "a", Limits: vendorsim.Limits{TPD: -1}}}}, "negative limit"},
		{"fault rate", vendorsim.Config{Keys: []vendorsim.Key{{Secret: "a", FaultRate: 1.5}}}, "FaultRate"},
		{"fault status", vendorsim.Config{Keys: []vendorsim.Key{{Secret: "a", FaultStatus: 429}}}, "FaultStatus"},
		{"script status", vendorsim.Config{Keys: []vendorsim.Key{{Secret: "a", Script: []vendorsim.Answer{{Status: 99}}}}}, "script step 0"},
		{"negative output", vendorsim.Config{Keys: []vendorsim.Key{ok}, OutputTokens: -1}, "OutputTokens"},
		{"account not listed", vendorsim.Config{Keys: []vendorsim.Key{{Secret: "a", Account: "org"}}},
			`key a names account "org", which Config.Accounts does not list`},
		{"account and key limits", vendorsim.Config{
			Accounts: map[string]vendorsim.Limits{"org": {RPM: 2}},
			Keys:     []vendorsim.Key{{Secret: "a", ID: "key-a", Account: "org", Limits: vendorsim.Limits{RPM: 1}}},
		}, `key key-a sets Limits and names account "org"`},
		{"negative account limit", vendorsim.Config{Accounts: map[string]vendorsim.Limits{"org": {RPM: 1, TPM: -1}}, Keys: []vendorsim.Key{ok}},
			`account "org" has a negative limit`},
		{"empty account name", vendorsim.Config{Accounts: map[string]vendorsim.Limits{"": {}}, Keys: []vendorsim.Key{ok}}, "empty name"},
		{"account named as a key", vendorsim.Config{Accounts: map[string]vendorsim.Limits{"k1": {}}, Keys: []vendorsim.Key{ok}},
			`account "k1" has the name of a key's ID`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := vendorsim.New(tt.cfg)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.Contains(t, err.Error(), tt.want)
			assert.True(t, strings.HasPrefix(err.Error(), "vendorsim: "), "error %q", err)
			assert.Panics(t, func() { vendorsim.Start(tt.cfg) })
		})
	}
}

func TestCredentialSources(t *testing.T) {
	for _, d := range []vendorsim.Dialect{vendorsim.OpenAI, vendorsim.Anthropic, vendorsim.Gemini} {
		s := start(t, vendorsim.Config{Dialect: d, Keys: []vendorsim.Key{{Secret: "secret-1"}}})
		url, body := endpoint(s, d)
		auths := map[string]func(*http.Request){
			"bearer":         bearer("secret-1"),
			"x-api-key":      xAPIKey("secret-1"),
			"x-goog-api-key": googKey("secret-1"),
			"query":          func(r *http.Request) { r.URL.RawQuery = "key=secret-1" },
		}
		for name, auth := range auths {
			t.Run(string(d)+"/"+name, func(t *testing.T) {
				a := send(t, http.MethodPost, url, body, auth)
				assert.Equal(t, http.StatusOK, a.status, "body %s", a.body)
			})
		}
		st, _ := s.StatsOf("secret-1")
		assert.Equal(t, int64(4), st.Served, "%s: the default ID is the secret", d)
	}
}

// endpoint returns a dialect's chat URL and a small request body for it.
func endpoint(s *vendorsim.Server, d vendorsim.Dialect) (url, body string) {
	switch d {
	case vendorsim.Anthropic:
		return s.URL() + "/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`
	case vendorsim.Gemini:
		return s.URL() + "/v1beta/models/gemini-2.0-flash:generateContent", `{"contents":[{"parts":[{"text":"hello"}]}]}`
	}
	return s.URL() + "/v1/chat/completions", chatBody
}

func TestUnknownAndMissingKeys(t *testing.T) {
	for _, d := range []vendorsim.Dialect{vendorsim.OpenAI, vendorsim.OpenAICompatible, vendorsim.Anthropic, vendorsim.Gemini} {
		t.Run(string(d), func(t *testing.T) {
			s := start(t, vendorsim.Config{Dialect: d, Keys: []vendorsim.Key{{Secret: "good"}}})
			url, body := endpoint(s, d)
			unknown := send(t, http.MethodPost, url, body, bearer("bad"))
			missing := send(t, http.MethodPost, url, body, nil)
			for _, a := range []answer{unknown, missing} {
				assert.Equal(t, http.StatusUnauthorized, a.status)
				assert.NotEmpty(t, a.decode(t)["error"], "a JSON error body")
				assert.Equal(t, "application/json", a.header.Get("Content-Type"))
			}
			assert.NotContains(t, string(unknown.body), "bad", "the sim does not echo a key")
			tot := s.Totals()
			assert.Equal(t, int64(2), tot.Unauthorized)
			assert.Equal(t, int64(2), tot.Requests)
			st, _ := s.StatsOf("good")
			assert.Zero(t, st.Requests, "unknown keys count in the totals only")
		})
	}
}

func TestBadRequestsAnswerJSON(t *testing.T) {
	for _, d := range []vendorsim.Dialect{vendorsim.OpenAI, vendorsim.Anthropic, vendorsim.Gemini} {
		s := start(t, vendorsim.Config{Dialect: d, Keys: []vendorsim.Key{{Secret: "k"}}})
		url, _ := endpoint(s, d)
		maxField := map[vendorsim.Dialect]string{
			vendorsim.OpenAI:    `{"max_tokens":-1}`,
			vendorsim.Anthropic: `{"max_tokens":0}`,
			vendorsim.Gemini:    `{"generationConfig":{"maxOutputTokens":-5}}`,
		}[d]
		wrongType := `{"stream":"yes","model":7}`
		if d == vendorsim.Gemini {
			wrongType = `{"generationConfig":{"maxOutputTokens":"many"}}`
		}
		tests := []struct {
			name   string
			method string
			url    string
			body   string
			want   int
		}{
			{"unknown path", http.MethodPost, s.URL() + "/v1/nothing", "{}", http.StatusNotFound},
			{"wrong method", http.MethodGet, url, "", http.StatusMethodNotAllowed},
			{"empty body", http.MethodPost, url, "", http.StatusBadRequest},
			{"not JSON", http.MethodPost, url, "{not json", http.StatusBadRequest},
			{"not an object", http.MethodPost, url, "[1,2]", http.StatusBadRequest},
			{"wrong type", http.MethodPost, url, wrongType, http.StatusBadRequest},
			{"bad max tokens", http.MethodPost, url, maxField, http.StatusBadRequest},
			{"too large", http.MethodPost, url, `{"x":"` + strings.Repeat("a", 9<<20) + `"}`, http.StatusRequestEntityTooLarge},
		}
		for _, tt := range tests {
			t.Run(string(d)+"/"+tt.name, func(t *testing.T) {
				a := send(t, tt.method, tt.url, tt.body, bearer("k"))
				assert.Equal(t, tt.want, a.status, "body %s", a.body)
				assert.NotEmpty(t, a.decode(t)["error"])
			})
		}
	}
}

func TestScriptIsConsumedInOrder(t *testing.T) {
	s := start(t, vendorsim.Config{Keys: []vendorsim.Key{{
		Secret: "k",
		Script: []vendorsim.Answer{
			{Status: 429, Header: http.Header{"retry-after": {"7"}}, Body: `{"error":"first"}`},
			{}, // answered as configured
			{Status: 503, Body: "second"},
			{Status: 200, Body: "third"},
		},
	}}})
	want := []struct {
		status int
		body   string
	}{
		{429, `{"error":"first"}`},
		{200, ""},
		{503, "second"},
		{200, "third"},
		{200, ""},
	}
	for i, w := range want {
		a := chat(t, s, "k", chatBody)
		require.Equal(t, w.status, a.status, "answer %d", i)
		if w.body != "" {
			assert.Equal(t, w.body, string(a.body), "answer %d", i)
		} else {
			assert.Equal(t, "chat.completion", a.decode(t)["object"], "answer %d is the sim's own", i)
		}
		if i == 0 {
			assert.Equal(t, "7", a.header.Get("Retry-After"))
			assert.Empty(t, a.header.Get("X-Ratelimit-Limit-Requests"), "a scripted answer carries only its own headers")
		}
	}
	st, _ := s.StatsOf("k")
	assert.Equal(t, vendorsim.Counts{Requests: 5, Served: 3, RateLimited: 1, ServerErrors: 1, Scripted: 3, Tokens: st.Tokens, InputTokens: st.InputTokens}, st.Counts)
	assert.Len(t, s.Accepted("k"), 2, "scripted answers are not accepted requests")
}

func TestRevokedAndNoCredit(t *testing.T) {
	tests := []struct {
		dialect   vendorsim.Dialect
		revoked   int
		noCredit  int
		creditMsg string
	}{
		{vendorsim.OpenAI, 401, 429, "insufficient_quota"},
		{vendorsim.OpenAICompatible, 401, 402, "Insufficient Balance"},
		{vendorsim.Anthropic, 401, 400, "credit balance is too low"},
		{vendorsim.Gemini, 400, 429, "prepayment credits are depleted"},
	}
	for _, tt := range tests {
		t.Run(string(tt.dialect), func(t *testing.T) {
			s := start(t, vendorsim.Config{Dialect: tt.dialect, Keys: []vendorsim.Key{
				{Secret: "r", Revoked: true},
				{Secret: "n", NoCredit: true},
			}})
			url, body := endpoint(s, tt.dialect)
			for range 3 {
				a := send(t, http.MethodPost, url, body, bearer("r"))
				assert.Equal(t, tt.revoked, a.status, "body %s", a.body)
				a = send(t, http.MethodPost, url, body, bearer("n"))
				assert.Equal(t, tt.noCredit, a.status, "body %s", a.body)
				assert.Contains(t, string(a.body), tt.creditMsg)
			}
			r, _ := s.StatsOf("r")
			n, _ := s.StatsOf("n")
			assert.Equal(t, vendorsim.Counts{Requests: 3, Unauthorized: 3}, r.Counts)
			assert.Equal(t, vendorsim.Counts{Requests: 3, Billing: 3}, n.Counts)
		})
	}
}

func TestFaults(t *testing.T) {
	statuses := func(seed uint64) []int {
		s := start(t, vendorsim.Config{Seed: seed, Keys: []vendorsim.Key{{Secret: "k", FaultRate: 0.3}}})
		var out []int
		for range 60 {
			out = append(out, chat(t, s, "k", chatBody).status)
		}
		return out
	}
	a, b, c := statuses(7), statuses(7), statuses(8)
	assert.Equal(t, a, b, "the same seed gives the same faults")
	assert.NotEqual(t, a, c, "another seed gives other faults")
	faults := 0
	for _, st := range a {
		if st == 500 {
			faults++
		} else {
			require.Equal(t, 200, st)
		}
	}
	assert.Greater(t, faults, 5)
	assert.Less(t, faults, 35)

	t.Run("burst and default statuses", func(t *testing.T) {
		for d, want := range map[vendorsim.Dialect]int{vendorsim.OpenAI: 500, vendorsim.Anthropic: 529, vendorsim.Gemini: 503} {
			s := start(t, vendorsim.Config{Dialect: d, Keys: []vendorsim.Key{{Secret: "k", FaultBurst: 2}, {Secret: "j", FaultBurst: 1, FaultStatus: 502}}})
			url, body := endpoint(s, d)
			got := []int{
				send(t, http.MethodPost, url, body, bearer("k")).status,
				send(t, http.MethodPost, url, body, bearer("k")).status,
				send(t, http.MethodPost, url, body, bearer("k")).status,
				send(t, http.MethodPost, url, body, bearer("j")).status,
			}
			assert.Equal(t, []int{want, want, 200, 502}, got, "%s", d)
			assert.Equal(t, int64(3), s.Totals().ServerErrors)
		}
	})
}

// TestLimitsAreStrict drives one key with bursts at random moments on an
// injected clock and checks, for every window, that the key never accepted
// more than its limit in any span of that window's length, while it did
// accept work in every window.
func TestLimitsAreStrict(t *testing.T) {
	c := newClock()
	limits := vendorsim.Limits{RPM: 7, RPD: 60, TPM: 1500, TPD: 9000}
	s := start(t, vendorsim.Config{Clock: c.Now, Keys: []vendorsim.Key{{Secret: "k", ID: "key", Limits: limits}}})
	sent := drive(t, s, c, rand.New(rand.NewPCG(3, 4)), 400, 40*time.Second, "k")
	assertStrict(t, s, "key", limits)
	st, _ := s.StatsOf("key")
	assert.Equal(t, int64(sent), st.Requests)
	assert.Equal(t, st.Requests, st.Served+st.RateLimited)
	assert.Positive(t, st.RateLimited)
	assert.Len(t, s.Accepted("key"), int(st.Served))
}

// TestConcurrentRequests sends many requests at once on a clock that stands
// still: each key must accept exactly its limit, under -race.
func TestConcurrentRequests(t *testing.T) {
	c := newClock()
	keys := []vendorsim.Key{
		{Secret: "a", Limits: vendorsim.Limits{RPM: 20}},
		{Secret: "b", Limits: vendorsim.Limits{RPM: 35}},
		{Secret: "c", Limits: vendorsim.Limits{RPM: 50}},
	}
	s := start(t, vendorsim.Config{Clock: c.Now, Keys: keys})
	var wg sync.WaitGroup
	for _, k := range keys {
		for range 60 {
			wg.Go(func() {
				a := chat(t, s, k.Secret, chatBody)
				assert.Contains(t, []int{200, 429}, a.status)
			})
		}
	}
	wg.Go(func() { // readers race the writers
		for range 20 {
			_ = s.Stats()
			_ = s.MaxInWindow("a", time.Minute)
			_ = s.Totals()
		}
	})
	wg.Wait()
	for _, k := range keys {
		st, _ := s.StatsOf(k.Secret)
		assert.Equal(t, k.Limits.RPM, st.Served, "key %s", k.Secret)
		assert.Equal(t, 60-k.Limits.RPM, st.RateLimited, "key %s", k.Secret)
	}
	assert.Equal(t, int64(180), s.Totals().Requests)
}

// drive sends rounds of 1 to 4 requests of random sizes, naming one of
// three models, each from one of keys, the rounds at random moments up to
// gap apart on c; every answer is a 200 or a 429. It returns how many it
// sent.
func drive(t *testing.T, s *vendorsim.Server, c *clock, rng *rand.Rand, rounds int, gap time.Duration, keys ...string) int {
	t.Helper()
	sent := 0
	for range rounds {
		c.Advance(time.Duration(rng.IntN(int(gap))))
		for range 1 + rng.IntN(4) {
			body := fmt.Sprintf(`{"model":"m%d","max_tokens":%d,"messages":[{"role":"user","content":%q}]}`,
				rng.IntN(3), 1+rng.IntN(150), strings.Repeat("x", rng.IntN(400)))
			a := chat(t, s, keys[rng.IntN(len(keys))], body)
			sent++
			require.Contains(t, []int{200, 429}, a.status, "body %s", a.body)
		}
	}
	return sent
}

// assertStrict checks that the key or account id never accepted more than
// its limits in any span of a minute or a day, and that it used more than
// half of each.
func assertStrict(t *testing.T, s *vendorsim.Server, id string, limits vendorsim.Limits) {
	t.Helper()
	for _, w := range []struct {
		span            time.Duration
		requests, token int64
	}{{time.Minute, limits.RPM, limits.TPM}, {24 * time.Hour, limits.RPD, limits.TPD}} {
		assert.LessOrEqual(t, int64(s.MaxInWindow(id, w.span)), w.requests, "%s: requests per %v", id, w.span)
		assert.LessOrEqual(t, s.MaxTokensInWindow(id, w.span), w.token, "%s: tokens per %v", id, w.span)
		assert.Greater(t, int64(s.MaxInWindow(id, w.span)), w.requests/2, "%s: the window is used, per %v", id, w.span)
	}
}

func TestWeeklySpentLiftsOnTheClock(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{Clock: c.Now, Keys: []vendorsim.Key{{Secret: "k", WeeklySpent: 3 * 24 * time.Hour}}})
	a := chat(t, s, "k", chatBody)
	require.Equal(t, 429, a.status)
	assert.InDelta(t, 3*24*3600, num(t, a.decode(t), "error", "resets_in_seconds"), 1)
	c.Advance(3*24*time.Hour - time.Second)
	a = chat(t, s, "k", chatBody)
	require.Equal(t, 429, a.status)
	assert.InDelta(t, 1, num(t, a.decode(t), "error", "resets_in_seconds"), 0)
	c.Advance(time.Second)
	assert.Equal(t, 200, chat(t, s, "k", chatBody).status)
}

func TestSubscriptionBudget(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{Clock: c.Now, Keys: []vendorsim.Key{{
		Secret: "k", Subscription: &vendorsim.Subscription{FiveHour: 3, SevenDay: 5},
	}}})
	for range 3 {
		require.Equal(t, 200, chat(t, s, "k", chatBody).status)
		c.Advance(time.Minute)
	}
	a := chat(t, s, "k", chatBody)
	require.Equal(t, 429, a.status)
	assert.Equal(t, "usage_limit_reached", str(t, a.decode(t), "error", "type"))
	// the first request leaves the 5-hour window 5 h after it was accepted
	assert.InDelta(t, (5*time.Hour - 3*time.Minute).Seconds(), num(t, a.decode(t), "error", "resets_in_seconds"), 1)

	c.Advance(5 * time.Hour)
	require.Equal(t, 200, chat(t, s, "k", chatBody).status)
	require.Equal(t, 200, chat(t, s, "k", chatBody).status)
	a = chat(t, s, "k", chatBody)
	require.Equal(t, 429, a.status, "the 7-day budget of 5 is spent")
	assert.Greater(t, num(t, a.decode(t), "error", "resets_in_seconds"), float64(6*24*3600))
}

func TestLatency(t *testing.T) {
	s := start(t, vendorsim.Config{Keys: []vendorsim.Key{{Secret: "k", Latency: 60 * time.Millisecond}}})
	began := time.Now()
	require.Equal(t, 200, chat(t, s, "k", chatBody).status)
	assert.GreaterOrEqual(t, time.Since(began), 60*time.Millisecond)
}

// TestCloseLeavesNoGoroutines closes a sim while an answer waits out a long
// latency: Close must cut it short and leave nothing of the sim or its HTTP
// server running.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	s := vendorsim.Start(vendorsim.Config{Keys: []vendorsim.Key{{Secret: "k", Latency: time.Hour}}})
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	done := make(chan int)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, s.URL()+"/v1/chat/completions", strings.NewReader(chatBody))
		req.Header.Set("Authorization", "Bearer k")
		resp, err := client.Do(req)
		if err != nil {
			done <- 0
			return
		}
		resp.Body.Close()
		done <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return s.Totals().Requests == 1 }, 5*time.Second, time.Millisecond)
	require.Contains(t, stacks(), "vendorsim.(*Server).sleep", "the answer waits out its latency")
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waited out the latency")
	}
	assert.Equal(t, 200, <-done, "the waiting answer is sent when the sim closes")
	s.Close() // a second Close is harmless
	tr.CloseIdleConnections()
	assert.Eventually(t, func() bool {
		st := stacks()
		return !strings.Contains(st, "vendorsim.(*Server)") && !strings.Contains(st, "net/http.(*conn).serve") &&
			!strings.Contains(st, "net/http.(*Server).Serve")
	}, 5*time.Second, 10*time.Millisecond, "goroutines left:\n%s", stacks())
}

func TestHandlerWithoutStart(t *testing.T) {
	s, err := vendorsim.New(vendorsim.Config{Keys: []vendorsim.Key{{Secret: "k"}}})
	require.NoError(t, err)
	assert.Empty(t, s.URL())
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/chat/completions", strings.NewReader(chatBody))
	req.Header.Set("Authorization", "Bearer k")
	s.ServeHTTP(rec, req)
	assert.Equal(t, 200, rec.Code)
	s.Close()
}

func TestResetStats(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{Clock: c.Now, Keys: []vendorsim.Key{{Secret: "k", Limits: vendorsim.Limits{RPM: 1}}}})
	require.Equal(t, 200, chat(t, s, "k", chatBody).status)
	require.Equal(t, 429, chat(t, s, "k", chatBody).status)
	s.ResetStats()
	st, _ := s.StatsOf("k")
	assert.Zero(t, st.Counts)
	assert.Zero(t, s.Totals())
	assert.Empty(t, s.Accepted("k"))
	assert.Equal(t, 429, chat(t, s, "k", chatBody).status, "the window is the vendor's, not a counter")
}

func TestStatsLookups(t *testing.T) {
	s := start(t, vendorsim.Config{Keys: []vendorsim.Key{{Secret: "s1", ID: "one"}, {Secret: "s2"}}})
	require.Equal(t, 200, chat(t, s, "s1", chatBody).status)
	stats := s.Stats()
	require.Len(t, stats, 2)
	assert.Equal(t, "one", stats[0].ID)
	assert.Equal(t, "s2", stats[1].ID)
	assert.Equal(t, int64(1), stats[0].Served)
	_, ok := s.StatsOf("s1")
	assert.False(t, ok, "a key with an ID is found by its ID only")
	assert.Zero(t, s.MaxInWindow("nobody", time.Minute))
	assert.Nil(t, s.Accepted("nobody"))
}

func TestHistoryIsBounded(t *testing.T) {
	s := start(t, vendorsim.Config{History: 3, Keys: []vendorsim.Key{{Secret: "k"}}})
	for range 5 {
		require.Equal(t, 200, chat(t, s, "k", chatBody).status)
	}
	assert.Len(t, s.Accepted("k"), 3)
	st, _ := s.StatsOf("k")
	assert.Equal(t, int64(5), st.Served, "counters are not bounded by History")
}

func stacks() string {
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}
