package vendorsim_test

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// simDialect is what the account tests need of one dialect: how to send it a
// request, and where its answers state the request and token windows.
type simDialect struct {
	d vendorsim.Dialect
	// The headers stating the request window's limit and remaining, and the
	// token window's remaining; "" for Gemini, which sends none.
	limit, remaining, tokensRemaining string
	// rpmFull is what the 429 of a full RPM window of limit says.
	rpmFull func(limit int) []string
	// retry is the wait a 429 asks for, as the dialect states it.
	retry func(t *testing.T, a answer) string
}

var simDialects = []simDialect{
	{
		d: vendorsim.OpenAI, limit: "X-Ratelimit-Limit-Requests", remaining: "X-Ratelimit-Remaining-Requests",
		tokensRemaining: "X-Ratelimit-Remaining-Tokens",
		rpmFull: func(limit int) []string {
			return []string{fmt.Sprintf("in organization org-a on requests per min (RPM): Limit %d, Used %d", limit, limit)}
		},
		retry: func(_ *testing.T, a answer) string { return a.header.Get("Retry-After") + "s" },
	},
	{
		d: vendorsim.OpenAICompatible, limit: "X-Ratelimit-Limit-Requests", remaining: "X-Ratelimit-Remaining-Requests",
		tokensRemaining: "X-Ratelimit-Remaining-Tokens",
		rpmFull: func(limit int) []string {
			return []string{fmt.Sprintf("in organization org-a on requests per min (RPM): Limit %d, Used %d", limit, limit)}
		},
		retry: func(_ *testing.T, a answer) string { return a.header.Get("Retry-After") + "s" },
	},
	{
		d: vendorsim.Anthropic, limit: "Anthropic-Ratelimit-Requests-Limit", remaining: "Anthropic-Ratelimit-Requests-Remaining",
		tokensRemaining: "Anthropic-Ratelimit-Tokens-Remaining",
		rpmFull: func(limit int) []string {
			return []string{fmt.Sprintf("rate limit of %d requests per minute", limit)}
		},
		retry: func(_ *testing.T, a answer) string { return a.header.Get("Retry-After") + "s" },
	},
	{
		d: vendorsim.Gemini,
		rpmFull: func(limit int) []string {
			return []string{`"quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier"`, fmt.Sprintf(`"quotaValue":"%d"`, limit)}
		},
		retry: func(t *testing.T, a answer) string {
			e := decodeStrict[geminiError](t, a.body)
			require.Len(t, e.Error.Details, 3, "body %s", a.body)
			return e.Error.Details[2].RetryDelay
		},
	},
}

// send sends one small request for model with key, as the dialect wants it.
func (sd simDialect) send(t *testing.T, s *vendorsim.Server, key, model string) answer {
	t.Helper()
	switch sd.d {
	case vendorsim.Anthropic:
		return send(t, http.MethodPost, s.URL()+"/v1/messages",
			`{"model":"`+model+`","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}`, xAPIKey(key))
	case vendorsim.Gemini:
		return send(t, http.MethodPost, s.URL()+"/v1beta/models/"+model+":generateContent",
			`{"contents":[{"parts":[{"text":"hello"}]}]}`, googKey(key))
	}
	return send(t, http.MethodPost, s.URL()+"/v1/chat/completions",
		`{"model":"`+model+`","messages":[{"role":"user","content":"hello"}]}`, bearer(key))
}

// namesRPM checks that a 429 names a full RPM window of limit, of org.
func (sd simDialect) namesRPM(t *testing.T, a answer, limit int, org string) {
	t.Helper()
	for _, want := range sd.rpmFull(limit) {
		assert.Contains(t, string(a.body), strings.ReplaceAll(want, "org-a", org), "the 429 names the RPM window")
	}
}

// window checks the request window an answer states: its limit and
// remaining, or no rate-limit header at all for Gemini.
func (sd simDialect) window(t *testing.T, a answer, limit, remaining string, msg string) {
	t.Helper()
	if sd.limit == "" {
		noRateLimitHeaders(t, a.header)
		return
	}
	assert.Equal(t, limit, a.header.Get(sd.limit), "%s: %s", msg, sd.limit)
	assert.Equal(t, remaining, a.header.Get(sd.remaining), "%s: %s", msg, sd.remaining)
}

// accountConfig is a sim with keys k1 and k2 in account org-a and key solo
// without an account.
func accountConfig(d vendorsim.Dialect, c *clock, account, solo vendorsim.Limits) vendorsim.Config {
	return vendorsim.Config{
		Dialect:  d,
		Clock:    c.Now,
		Accounts: map[string]vendorsim.Limits{"org-a": account},
		Keys: []vendorsim.Key{
			{Secret: "s1", ID: "k1", Account: "org-a"},
			{Secret: "s2", ID: "k2", Account: "org-a"},
			{Secret: "s3", ID: "solo", Limits: solo},
		},
	}
}

var secretOf = map[string]string{"k1": "s1", "k2": "s2", "solo": "s3"}

// TestAccountSharesRPM sends three requests a second apart to an account at
// RPM 2 from its two keys, each naming another model: whichever key sends
// the third, it is a 429 that names the account's RPM window and asks to
// wait until the account's first request leaves it; every answer states the
// account's limit and what remains of it; a key outside the account is not
// touched; the counters add up per key and per account.
func TestAccountSharesRPM(t *testing.T) {
	orders := [][3]string{{"k1", "k1", "k2"}, {"k1", "k2", "k1"}, {"k2", "k1", "k1"}, {"k2", "k2", "k2"}}
	for _, sd := range simDialects {
		for _, order := range orders {
			t.Run(string(sd.d)+"/"+strings.Join(order[:], ","), func(t *testing.T) {
				c := newClock()
				s := start(t, accountConfig(sd.d, c, vendorsim.Limits{RPM: 2}, vendorsim.Limits{RPM: 2}))
				wantStatus := []int{200, 200, 429}
				wantRemaining := []string{"1", "0", "0"}
				sent := map[string]int64{}
				for i, id := range order {
					a := sd.send(t, s, secretOf[id], fmt.Sprintf("model-%d", i))
					require.Equal(t, wantStatus[i], a.status, "request %d by %s: body %s", i, id, a.body)
					sd.window(t, a, "2", wantRemaining[i], fmt.Sprintf("request %d", i))
					sent[id]++
					if i < 2 {
						c.Advance(time.Second)
					}
				}
				last := sd.send(t, s, secretOf[order[2]], "model-2")
				require.Equal(t, 429, last.status)
				sd.namesRPM(t, last, 2, "org-a")
				assert.Equal(t, "58s", sd.retry(t, last), "the account's first request leaves its window at 60 s")
				sent[order[2]]++

				for range 2 {
					a := sd.send(t, s, "s3", "model-0")
					require.Equal(t, 200, a.status, "a key outside the account keeps its own window")
				}
				sd.window(t, sd.send(t, s, "s3", "model-0"), "2", "0", "the solo key's own window")

				acc, ok := s.AccountStatsOf("org-a")
				require.True(t, ok)
				assert.Equal(t, []string{"k1", "k2"}, acc.Keys)
				assert.Equal(t, int64(4), acc.Requests)
				assert.Equal(t, int64(2), acc.Served)
				assert.Equal(t, int64(2), acc.RateLimited)
				assert.Equal(t, 2, s.MaxInWindow("org-a", time.Minute))
				assert.Len(t, s.Accepted("org-a"), 2)
				for _, id := range []string{"k1", "k2"} {
					st, _ := s.StatsOf(id)
					assert.Equal(t, sent[id], st.Requests, "key %s: per-key counters stay per key", id)
					assert.Equal(t, int64(len(s.Accepted(id))), st.Served, "key %s", id)
				}
				solo, _ := s.StatsOf("solo")
				assert.Equal(t, vendorsim.Counts{Requests: 3, Served: 2, RateLimited: 1, Tokens: solo.Tokens, InputTokens: solo.InputTokens}, solo.Counts)

				c.Advance(time.Minute)
				a := sd.send(t, s, secretOf[order[2]], "model-3")
				require.Equal(t, 200, a.status, "the account's window slid past both")
				sd.window(t, a, "2", "1", "after a minute")
			})
		}
	}
}

// TestAccountTokenHeaders checks that a key's answer states what remains of
// the account's token window after the other key's request too.
func TestAccountTokenHeaders(t *testing.T) {
	for _, sd := range simDialects {
		if sd.tokensRemaining == "" {
			continue // Gemini states no window
		}
		t.Run(string(sd.d), func(t *testing.T) {
			c := newClock()
			s := start(t, accountConfig(sd.d, c, vendorsim.Limits{TPM: 10_000}, vendorsim.Limits{}))
			require.Equal(t, 200, sd.send(t, s, "s1", "m").status)
			a := sd.send(t, s, "s2", "m")
			require.Equal(t, 200, a.status)
			acc, _ := s.AccountStatsOf("org-a")
			assert.Equal(t, fmt.Sprint(10_000-acc.Tokens), a.header.Get(sd.tokensRemaining))
			k1, _ := s.StatsOf("k1")
			assert.Positive(t, k1.Tokens)
			assert.Equal(t, 2*k1.Tokens, acc.Tokens, "two like requests")
			assert.Equal(t, acc.Tokens, s.MaxTokensInWindow("org-a", time.Minute))
		})
	}
}

// TestWindowsSpanModels pins the rule the package doc states: windows are
// per key (or per account), not per key × model.
func TestWindowsSpanModels(t *testing.T) {
	for _, sd := range simDialects {
		t.Run(string(sd.d), func(t *testing.T) {
			s := start(t, accountConfig(sd.d, newClock(), vendorsim.Limits{RPM: 1}, vendorsim.Limits{RPM: 1}))
			for _, key := range []string{"s1", "s3"} {
				require.Equal(t, 200, sd.send(t, s, key, "model-a").status)
				assert.Equal(t, 429, sd.send(t, s, key, "model-b").status, "key %s: another model counts in the same window", key)
			}
		})
	}
}

// TestAccountLimitsAreStrict drives three keys of one account with bursts at
// random moments and checks, for every window, that the account never
// accepted more than its limit in any span of that window's length, while
// it did use each window.
func TestAccountLimitsAreStrict(t *testing.T) {
	c := newClock()
	limits := vendorsim.Limits{RPM: 7, RPD: 60, TPM: 1500, TPD: 9000}
	keys := []string{"a", "b", "c"}
	cfg := vendorsim.Config{Clock: c.Now, Accounts: map[string]vendorsim.Limits{"org": limits}}
	for _, k := range keys {
		cfg.Keys = append(cfg.Keys, vendorsim.Key{Secret: k, Account: "org"})
	}
	s := start(t, cfg)
	drive(t, s, c, rand.New(rand.NewPCG(5, 6)), 300, 30*time.Second, keys...)
	assertStrict(t, s, "org", limits)
	acc, _ := s.AccountStatsOf("org")
	var served int64
	for _, k := range keys {
		st, _ := s.StatsOf(k)
		assert.Positive(t, st.Served, "key %s", k)
		served += st.Served
	}
	assert.Equal(t, served, acc.Served)
	assert.Positive(t, acc.RateLimited)
	assert.Equal(t, acc.Requests, acc.Served+acc.RateLimited)
	assert.Len(t, s.Accepted("org"), int(acc.Served))
}

// TestAccountConcurrentRequests sends many requests at once through the keys
// of one account on a clock that stands still: the account must accept
// exactly its limit, under -race, while SetLimits and the counters are read
// and written.
func TestAccountConcurrentRequests(t *testing.T) {
	c := newClock()
	s := start(t, vendorsim.Config{
		Clock:    c.Now,
		Accounts: map[string]vendorsim.Limits{"org": {RPM: 30}},
		Keys: []vendorsim.Key{
			{Secret: "a", Account: "org"},
			{Secret: "b", Account: "org"},
			{Secret: "c", Account: "org"},
			{Secret: "solo", Limits: vendorsim.Limits{RPM: 5}},
		},
	})
	var wg sync.WaitGroup
	for _, k := range []string{"a", "b", "c", "solo"} {
		for range 20 {
			wg.Go(func() {
				a := chat(t, s, k, chatBody)
				assert.Contains(t, []int{200, 429}, a.status)
			})
		}
	}
	wg.Go(func() { // readers and a writer race the requests
		for range 20 {
			_ = s.Accounts()
			_ = s.MaxInWindow("org", time.Minute)
			assert.NoError(t, s.SetLimits("org", vendorsim.Limits{RPM: 30}))
			assert.NoError(t, s.SetLimits("solo", vendorsim.Limits{RPM: 5}))
		}
	})
	wg.Wait()
	acc, _ := s.AccountStatsOf("org")
	assert.Equal(t, int64(30), acc.Served)
	assert.Equal(t, int64(30), acc.RateLimited)
	assert.Equal(t, 30, s.MaxInWindow("org", time.Minute))
	solo, _ := s.StatsOf("solo")
	assert.Equal(t, int64(5), solo.Served)
}

// TestSetLimits changes limits between two answers: the next answer is
// decided by the new limits and states them.
func TestSetLimits(t *testing.T) {
	tests := []struct {
		name             string
		account, solo    vendorsim.Limits
		target           string // the ID or name SetLimits is given
		before, after    string // the keys sending before and after the change
		sent             int    // requests sent before the change, all accepted
		set              vendorsim.Limits
		want             []int  // statuses after the change
		limit, remaining string // the first answer's request window; "" for none
		rpmFull          int    // the limit the last 429 names; 0 for no 429
	}{
		{"a key's limit raised", vendorsim.Limits{}, vendorsim.Limits{RPM: 1}, "solo", "s3", "s3", 1,
			vendorsim.Limits{RPM: 3}, []int{200, 200, 429}, "3", "1", 3},
		{"an account's limit raised", vendorsim.Limits{RPM: 1}, vendorsim.Limits{}, "org-a", "s1", "s2", 1,
			vendorsim.Limits{RPM: 3}, []int{200, 200, 429}, "3", "1", 3},
		{"an account's limit lowered below its use", vendorsim.Limits{RPM: 3}, vendorsim.Limits{}, "org-a", "s1", "s2", 2,
			vendorsim.Limits{RPM: 1}, []int{429}, "1", "0", 0},
		{"an account's limit removed", vendorsim.Limits{RPM: 1}, vendorsim.Limits{}, "org-a", "s1", "s2", 1,
			vendorsim.Limits{}, []int{200, 200, 200}, "", "", 0},
		{"an account's limit set where there was none", vendorsim.Limits{}, vendorsim.Limits{}, "org-a", "s1", "s2", 3,
			vendorsim.Limits{RPM: 2}, []int{200, 200, 429}, "2", "1", 2},
	}
	for _, sd := range simDialects {
		for _, tt := range tests {
			t.Run(string(sd.d)+"/"+tt.name, func(t *testing.T) {
				c := newClock()
				s := start(t, accountConfig(sd.d, c, tt.account, tt.solo))
				for i := range tt.sent {
					require.Equal(t, 200, sd.send(t, s, tt.before, "m").status, "request %d before the change", i)
				}
				require.NoError(t, s.SetLimits(tt.target, tt.set))
				var last answer
				for i, want := range tt.want {
					last = sd.send(t, s, tt.after, "m")
					require.Equal(t, want, last.status, "request %d after the change: body %s", i, last.body)
					if i == 0 && tt.limit != "" {
						sd.window(t, last, tt.limit, tt.remaining, "the first answer after the change")
					}
					if i == 0 && tt.limit == "" && sd.limit != "" {
						assert.Empty(t, last.header.Get(sd.limit), "no request window is stated")
					}
				}
				if tt.rpmFull > 0 {
					sd.namesRPM(t, last, tt.rpmFull, orgOf(tt.target))
				}
			})
		}
	}
}

// orgOf is the organization an OpenAI 429 names for a key or an account.
func orgOf(target string) string {
	if target == "org-a" {
		return target
	}
	return "org-sim"
}

func TestSetLimitsRefuses(t *testing.T) {
	s := start(t, accountConfig(vendorsim.OpenAI, newClock(), vendorsim.Limits{RPM: 1}, vendorsim.Limits{RPM: 1}))
	tests := []struct {
		name string
		id   string
		l    vendorsim.Limits
		want string
	}{
		{"unknown", "nobody", vendorsim.Limits{RPM: 1}, `SetLimits("nobody"): no key or account`},
		{"negative", "org-a", vendorsim.Limits{TPD: -1}, `SetLimits("org-a"): a negative limit`},
		{"a key of an account", "k1", vendorsim.Limits{RPM: 5}, `SetLimits("k1"): the key is held to the limits of account "org-a"`},
		{"a key by its secret", "s3", vendorsim.Limits{RPM: 5}, `SetLimits("s3"): no key or account`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.SetLimits(tt.id, tt.l)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.True(t, strings.HasPrefix(err.Error(), "vendorsim: "), "error %q", err)
		})
	}
	require.Equal(t, 200, chat(t, s, "s1", chatBody).status)
	assert.Equal(t, 429, chat(t, s, "s2", chatBody).status, "a refused SetLimits changed nothing")
}

func TestAccountStatsLookups(t *testing.T) {
	s := start(t, vendorsim.Config{
		Accounts: map[string]vendorsim.Limits{"zeta": {}, "alpha": {}, "unused": {}},
		Keys: []vendorsim.Key{
			{Secret: "z1", Account: "zeta"}, {Secret: "a1", Account: "alpha"}, {Secret: "a2", Account: "alpha"},
		},
	})
	require.Equal(t, 200, chat(t, s, "a2", chatBody).status)
	all := s.Accounts()
	require.Len(t, all, 3)
	assert.Equal(t, []string{"alpha", "unused", "zeta"}, []string{all[0].Name, all[1].Name, all[2].Name})
	assert.Equal(t, []string{"a1", "a2"}, all[0].Keys)
	assert.Equal(t, int64(1), all[0].Served)
	assert.Empty(t, all[1].Keys, "an account no key names is allowed")
	assert.Zero(t, all[2].Counts)
	_, ok := s.AccountStatsOf("nobody")
	assert.False(t, ok)
	assert.NotNil(t, s.Accepted("unused"), "a known account with nothing accepted")
	assert.Nil(t, s.Accepted("nobody"))
}

func TestResetStatsKeepsAccountWindows(t *testing.T) {
	s := start(t, accountConfig(vendorsim.OpenAI, newClock(), vendorsim.Limits{RPM: 1}, vendorsim.Limits{}))
	require.Equal(t, 200, chat(t, s, "s1", chatBody).status)
	s.ResetStats()
	acc, _ := s.AccountStatsOf("org-a")
	assert.Zero(t, acc.Counts)
	assert.Empty(t, s.Accepted("org-a"))
	assert.Equal(t, 429, chat(t, s, "s2", chatBody).status, "the account's window is the vendor's, not a counter")
}

// TestAccountClockGoesBack reads a clock that goes back between two keys of
// one account: the account's windows and history still only see times that
// never go back, so the second request counts where the first did.
func TestAccountClockGoesBack(t *testing.T) {
	c := newClock()
	s := start(t, accountConfig(vendorsim.OpenAI, c, vendorsim.Limits{RPM: 3}, vendorsim.Limits{}))
	c.Advance(30 * time.Second)
	require.Equal(t, 200, chat(t, s, "s1", chatBody).status)
	c.Advance(-30 * time.Second) // k2 has never read a later time itself
	a := chat(t, s, "s2", chatBody)
	require.Equal(t, 200, a.status)
	assert.Equal(t, "1", a.header.Get("X-Ratelimit-Remaining-Requests"))
	assert.Equal(t, []time.Time{t0.Add(30 * time.Second), t0.Add(30 * time.Second)}, s.Accepted("org-a"))
	assert.Equal(t, []time.Time{t0.Add(30 * time.Second)}, s.Accepted("k2"))
}
