package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// testClock is a clock a test sets.
type testClock struct{ ns atomic.Int64 }

func newTestClock(t time.Time) *testClock {
	c := &testClock{}
	c.set(t)
	return c
}

func (c *testClock) now() time.Time  { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) set(t time.Time) { c.ns.Store(t.UnixNano()) }

func TestConfigSpend(t *testing.T) {
	const keys = `keys: [{secret: a, account: team}, {secret: b, paid: true, budget: {per_day: 5, per_month: 50}}]`
	tests := []struct{ name, upstream, want string }{
		{"fine", keys + `, prices: {gpt-4o: {input: 2.5, output: 10, cached_input: 1.25}}, account_budgets: {team: {per_month: 100}}`, ""},
		{"a negative price", keys + `, prices: {gpt-4o: {input: -2.5}}`, "upstreams[0].prices.gpt-4o.input: -2.5 is negative"},
		{"a price beyond measure", keys + `, prices: {gpt-4o: {output: .inf}}`, "upstreams[0].prices.gpt-4o.output: +Inf is not a finite amount"},
		{"a price that is not a number", keys + `, prices: {gpt-4o: {cached_input: cheap}}`,
			`upstreams[0].prices.gpt-4o.cached_input: "cheap" is not a number such as 2.5 (line 2)`},
		{"a price's field misspelt", keys + `, prices: {gpt-4o: {inputs: 1}}`, "upstreams[0].prices.gpt-4o.inputs: unknown field; did you mean input? (line 2)"},
		{"a model's name with a dot", keys + `, prices: {"gpt-4.1": {input: -1}}`, `upstreams[0].prices["gpt-4.1"].input: -1 is negative`},
		{"a key's negative budget", `keys: [{secret: a, budget: {per_month: -50}}], prices: {m: {input: 1}}`, "upstreams[0].keys[0].budget.per_month: -50 is negative"},
		{"a key's budget of NaN", `keys: [{secret: a, budget: {per_day: .nan}}], prices: {m: {input: 1}}`, "upstreams[0].keys[0].budget.per_day: NaN is not a finite amount"},
		{"a budget's field misspelt", `keys: [{secret: a, budget: {per_week: 1}}], prices: {m: {input: 1}}`, "upstreams[0].keys[0].budget.per_week: unknown field (line 2)"},
		{"a key's budget without prices", `keys: [{secret: a, budget: {per_day: 1}}]`,
			"upstreams[0].keys[0].budget: upstreams[0].prices is not set: a budget counts spend by the models' prices, and a model without one is never sent to a key with a budget"},
		{"an account's budget without prices", "keys: [{secret: a, account: team}], account_budgets: {team: {per_day: 1}}",
			"upstreams[0].account_budgets.team: upstreams[0].prices is not set: a budget counts spend by the models' prices, and a model without one is never sent to an account with a budget"},
		{"an account no key names", keys + `, prices: {m: {input: 1}}, account_budgets: {teem: {per_day: 1}}`,
			`upstreams[0].account_budgets.teem: no key of this upstream names the account "teem"`},
		{"an account's negative budget", keys + `, prices: {m: {input: 1}}, account_budgets: {team: {per_day: -1}}`,
			"upstreams[0].account_budgets.team.per_day: -1 is negative"},
		{"a key's budget below the counting unit", `keys: [{secret: a, budget: {per_day: 0.0000004}}], prices: {m: {input: 1}}`,
			"upstreams[0].keys[0].budget.per_day: budget {PerDay:4e-07 PerMonth:0}: 4e-07 is below a millionth of a dollar, the unit spend is counted in, and would cap nothing (0 is no cap)"},
		{"an account's budget below the counting unit", keys + `, prices: {m: {input: 1}}, account_budgets: {team: {per_month: 1e-9}}`,
			"upstreams[0].account_budgets.team.per_month: budget {PerDay:0 PerMonth:1e-09}: 1e-09 is below a millionth of a dollar, the unit spend is counted in, and would cap nothing (0 is no cap)"},
		{"a negative max_output", keys + `, prices: {gpt-4o: {input: 1, max_output: -5}}`, "upstreams[0].prices.gpt-4o.max_output: -5 is negative"},
		{"an account's name the library refuses", "keys: [{secret: a, account: \"t\\x01m\"}], prices: {m: {input: 1}}, account_budgets: {\"t\\x01m\": {per_day: 1}}",
			`upstreams[0].account_budgets["t\x01m"]: the account has a control character at byte 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig([]byte("proxy_tokens: [t]\nupstreams: [{url: 'https://x', "+tt.upstream+"}]\n"), "k")
			if err == nil {
				var s *settings
				s, err = c.resolve(func(string) (string, bool) { return "", false })
				if tt.want == "" {
					require.NoError(t, err)
					assertBudgets(t, s)
					return
				}
			}
			require.Error(t, err)
			assert.Contains(t, lines(err.Error()), tt.want)
			others := map[string]int{"an account's name the library refuses": 1} // the key's account too
			assert.Len(t, lines(err.Error()), 1+others[tt.name], "one mistake, at its field: %s", err)
		})
	}
}

// A price's max_output reaches the pool, and check warns of a budgeted
// upstream whose prices lack it: requests without max_tokens would run
// one at a time.
func TestConfigMaxOutput(t *testing.T) {
	resolve := func(upstream string) *settings {
		c, err := parseConfig([]byte("proxy_tokens: [kp-a-proxy-token-long-enough]\noperator_tokens: [kp-an-operator-token-long-enough]\nupstreams: [{url: 'https://x', "+upstream+"}]\n"), "k")
		require.NoError(t, err)
		s, err := c.resolve(func(string) (string, bool) { return "", false })
		require.NoError(t, err)
		return s
	}
	const budgeted = `keys: [{secret: a, budget: {per_day: 1}}], `
	s := resolve(budgeted + `prices: {gpt-4o: {input: 2.5, output: 10, max_output: 16384}, o1: {input: 15, output: 60}, o3: {output: 8}}`)
	assert.Equal(t, []string{"upstreams[0].prices: o1, o3 have no max_output: a request for them that names no max_tokens reserves all that is left of a budget, and runs alone"}, s.warnings)
	assert.Empty(t, resolve(budgeted+`prices: {gpt-4o: {input: 2.5, max_output: 16384}}`).warnings)
	assert.Empty(t, resolve(`keys: [{secret: a}], prices: {o1: {input: 15}}`).warnings, "no budget: nothing to reserve")

	// The pool reserves max_output for a request without max_tokens: at
	// $10 a million, 16384 tokens are $0.16, more than a $0.10 budget.
	s = resolve(`keys: [{secret: a, budget: {per_day: 0.1}}], prices: {gpt-4o: {output: 10, max_output: 16384}}`)
	r := s.routes[0]
	pool, err := keypool.New(r.name, r.keys, r.options...)
	require.NoError(t, err)
	defer pool.Close()
	err = pool.Do(t.Context(), "gpt-4o", func(context.Context, keypool.Key) error { return nil })
	assert.ErrorContains(t, err, "can cost up to $0.163840")
}

// assertBudgets checks that the fine case's budgets reach its pool: the
// key's and its account's, as Pool.Stats shows them.
func assertBudgets(t *testing.T, s *settings) {
	t.Helper()
	r := s.routes[0]
	pool, err := keypool.New(r.name, r.keys, r.options...)
	require.NoError(t, err)
	defer pool.Close()
	stats := pool.Stats()
	require.Len(t, stats, 2)
	assert.Equal(t, keypool.Budget{PerMonth: 100}, stats[0].AccountBudget, "the account's budget")
	assert.Equal(t, keypool.Budget{PerDay: 5, PerMonth: 50}, stats[1].Budget, "the key's budget")
}

// spendBody is the request of the spend tests, and what the fake vendor
// says it used: its body's length / 4 tokens of input, and max_tokens of
// output.
const spendBody = `{"model":"gpt-4o-mini","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`

// spendCost is what one spendBody costs at 1000 US dollars per million
// tokens of input and 2000 of output: priced by the split the vendor
// reports.
var spendCost = (float64(len(spendBody)/4)*1000 + 64*2000) / 1e6

// spendConfig is a proxy of a free key good for two requests a day and a
// paid key with a budget of 0.45 US dollars a day, at a fake vendor.
func spendConfig(sim *vendorsim.Server, state string) string {
	return fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - name: openai
    url: %s
    prices: {gpt-4o-mini: {input: 1000, output: 2000}}
    keys:
      - {id: free, secret: sk-spend-free, limits: {rpd: 2}}
      - {id: paid, secret: sk-spend-paid, paid: true, budget: {per_day: 0.45, per_month: 10}}
`, proxyToken, state, sim.URL())
}

func spendSim(t *testing.T, clock func() time.Time) *vendorsim.Server {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock, Keys: []vendorsim.Key{
		{Secret: "sk-spend-free", ID: "free"}, {Secret: "sk-spend-paid", ID: "paid"}}})
	t.Cleanup(sim.Close)
	return sim
}

// spendRequest sends spendBody through the proxy at addr and returns the
// answer's status, Retry-After and retry_at.
func spendRequest(t *testing.T, addr string) (status int, retryAfter, retryAt string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(spendBody))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body) // read whole: the usage in it settles the spend
	require.NoError(t, err)
	var failure struct {
		Error struct {
			RetryAt string `json:"retry_at"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &failure)
	return resp.StatusCode, resp.Header.Get("Retry-After"), failure.Error.RetryAt
}

// spendUntilRefused sends requests until the proxy refuses one, at most
// 20, and returns how many were served, with the refusal's Retry-After and
// retry_at.
func spendUntilRefused(t *testing.T, addr string) (served int, retryAfter, retryAt string) {
	t.Helper()
	for range 20 {
		status, ra, at := spendRequest(t, addr)
		if status != http.StatusOK {
			require.Equal(t, http.StatusTooManyRequests, status)
			return served, ra, at
		}
		served++
	}
	t.Fatal("the budget never ran out")
	return 0, "", ""
}

// statusKeys returns the keys of the proxy's first route by ID, from
// /status.
func statusKeys(t *testing.T, addr string) map[string]keyView {
	t.Helper()
	status, body := get(t, "http://"+addr+"/status", nil, http.Header{"Authorization": {"Bearer " + proxyToken}})
	require.Equal(t, http.StatusOK, status, body)
	var report statusReport
	require.NoError(t, json.Unmarshal([]byte(body), &report))
	keys := map[string]keyView{}
	for _, k := range report.Routes[0].Keys {
		keys[k.ID] = k
	}
	return keys
}

func TestProxyStopsAPaidKeyAtItsBudgetUntilTheNextDay(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC))
	sim := spendSim(t, clock.now)
	addr := serveAt(t, spendConfig(sim, t.TempDir()), clock)

	served, retryAfter, retryAt := spendUntilRefused(t, addr)
	paid, _ := sim.StatsOf("paid")
	free, _ := sim.StatsOf("free")
	assert.Equal(t, int64(2), free.Served, "the free key first, for its two requests")
	assert.Equal(t, int64(served-2), paid.Served, "then the paid key")
	// 0.45 US dollars at 0.15 a request (spendCost: 22 tokens of input at
	// 1000 a million, 64 of output at 2000), each estimated at as much
	// (the prompt's bytes / 4, and max_tokens, which the fake vendor
	// answers in full): the third request's estimate fits what is left,
	// and its answer uses the budget up.
	assert.Equal(t, int64(3), paid.Served, "the paid key serves while its budget lasts")
	assert.Equal(t, "3600", retryAfter, "back at the next midnight UTC, an hour away")
	assert.Equal(t, "2026-03-11T00:00:00Z", retryAt)

	// /status carries the spend: what the vendor's usage says was spent.
	k := statusKeys(t, addr)["paid"]
	require.NotNil(t, k.Spend, "the paid key's spend")
	assert.InDelta(t, 3*spendCost, k.Spend.Today, 1e-6, "settled from the usage the vendor reported")
	assert.InDelta(t, 3*spendCost, k.Spend.Month, 1e-6)
	assert.Equal(t, 0.45, k.Spend.PerDay)
	assert.Equal(t, "full", k.State)
	assert.Equal(t, "budget-day", k.Full, "its budget for the day is spent")
	assert.Equal(t, 10.0, k.Spend.PerMonth)
	assert.Nil(t, statusKeys(t, addr)["free"].Spend, "a key without a budget that spent nothing shows no spend")

	// The refusal holds until midnight, and no request reaches the vendor.
	clock.set(time.Date(2026, 3, 10, 23, 59, 30, 0, time.UTC))
	status, retryAfter, _ := spendRequest(t, addr)
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Equal(t, "30", retryAfter)
	after, _ := sim.StatsOf("paid")
	assert.Equal(t, paid.Served, after.Served, "nothing sent while the budget is spent")

	// The next day the paid key serves again, with the day's spend at zero
	// and the month's carried on.
	clock.set(time.Date(2026, 3, 11, 0, 0, 1, 0, time.UTC))
	status, _, _ = spendRequest(t, addr)
	assert.Equal(t, http.StatusOK, status, "the budget of a new day")
	k = statusKeys(t, addr)["paid"]
	require.NotNil(t, k.Spend)
	assert.InDelta(t, spendCost, k.Spend.Today, 1e-6)
	assert.InDelta(t, 4*spendCost, k.Spend.Month, 1e-6)
}

func TestServeProcessRefusesASpentBudgetUntilMidnightUTC(t *testing.T) {
	now := time.Now().UTC()
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if midnight.Sub(now) < 2*time.Minute {
		t.Skip("within two minutes of midnight UTC, the budget's day may turn during the test: run it again in a few minutes")
	}
	sim := spendSim(t, nil)
	p := startServe(t, spendConfig(sim, t.TempDir()))
	served, retryAfter, retryAt := spendUntilRefused(t, p.addr)
	assert.Equal(t, 5, served, "the free key's 2, then the paid key's 3")
	secs, err := strconv.ParseFloat(retryAfter, 64)
	require.NoError(t, err)
	assert.InDelta(t, math.Ceil(time.Until(midnight).Seconds()), secs, 3, "Retry-After: until the next midnight UTC")
	assert.Equal(t, midnight.Format(time.RFC3339), retryAt)
	assert.NotContains(t, p.stderr.String(), "sk-spend")
}

func TestViewSpend(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		stats keypool.KeyStats
		spend *spendView
		full  string
		words string
	}{
		{"no budget, nothing spent", keypool.KeyStats{}, nil, "", "serving"},
		{"spent without a budget", keypool.KeyStats{Spent: keypool.Budget{PerDay: 0.5, PerMonth: 3}},
			&spendView{Today: 0.5, Month: 3}, "", "serving"},
		{"within its budget", keypool.KeyStats{Spent: keypool.Budget{PerDay: 0.5, PerMonth: 3}, Budget: keypool.Budget{PerDay: 1, PerMonth: 10}},
			&spendView{Today: 0.5, Month: 3, PerDay: 1, PerMonth: 10}, "", "serving"},
		{"the day's budget spent", keypool.KeyStats{Spent: keypool.Budget{PerDay: 1, PerMonth: 3}, Budget: keypool.Budget{PerDay: 1, PerMonth: 10}},
			&spendView{Today: 1, Month: 3, PerDay: 1, PerMonth: 10}, "budget-day", "budget spent for today"},
		{"the month's budget spent", keypool.KeyStats{Spent: keypool.Budget{PerDay: 1, PerMonth: 10.5}, Budget: keypool.Budget{PerDay: 1, PerMonth: 10}},
			&spendView{Today: 1, Month: 10.5, PerDay: 1, PerMonth: 10}, "budget-month", "budget spent for this month"},
		{"the account's budget spent", keypool.KeyStats{Account: "team", AccountSpent: keypool.Budget{PerDay: 2}, AccountBudget: keypool.Budget{PerDay: 2}},
			nil, "budget-day", "budget spent for today"},
		{"the account's month outlasts the key's day", keypool.KeyStats{Account: "team",
			Spent: keypool.Budget{PerDay: 1}, Budget: keypool.Budget{PerDay: 1},
			AccountSpent: keypool.Budget{PerMonth: 20}, AccountBudget: keypool.Budget{PerMonth: 20}},
			&spendView{Today: 1, PerDay: 1}, "budget-month", "budget spent for this month"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := viewKey(tt.stats, now)
			assert.Equal(t, tt.spend, k.Spend)
			assert.Equal(t, tt.full, k.Full)
			assert.Equal(t, tt.words, stateWords(k, now))
		})
	}
}

func TestViewRoutesShowsAccountsSpend(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	team := keypool.Budget{PerDay: 0.25, PerMonth: 4}
	routes := viewRoutes([]keypool.RouteStatus{{Name: "openai", Keys: []keypool.KeyStats{
		{ID: "a", Account: "team", AccountSpent: team, AccountBudget: keypool.Budget{PerDay: 1, PerMonth: 20}},
		{ID: "b", Account: "team", AccountSpent: team, AccountBudget: keypool.Budget{PerDay: 1, PerMonth: 20}},
		{ID: "c", Account: "quiet"}, // no budget, nothing spent: not shown
		{ID: "d"},
	}}}, now)
	require.Len(t, routes, 1)
	assert.Equal(t, []accountView{{Name: "team", Spend: spendView{Today: 0.25, Month: 4, PerDay: 1, PerMonth: 20}}}, routes[0].Accounts,
		"each account once, with what its keys spent together")
	b, err := json.Marshal(routes[0])
	require.NoError(t, err)
	assert.Contains(t, string(b), `"accounts":[{"name":"team","spend":{"today":0.25,"month":4,"per_day":1,"per_month":20}}]`)

	var out strings.Builder
	printRoutes(&out, routes, now, false)
	assert.Contains(t, out.String(), "SPEND (USD)")
	assert.Regexp(t, `openai account team\s+0\.25 of 1\.00\s+4\.00 of 20\.00\n`, out.String())
	out.Reset()
	printRoutes(&out, viewRoutes([]keypool.RouteStatus{{Name: "openai", Keys: []keypool.KeyStats{{ID: "d"}}}}, now), now, false)
	assert.NotContains(t, out.String(), "SPEND", "no spend table without a budget or spend")
}

func TestUSD(t *testing.T) {
	for v, want := range map[float64]string{0: "0.00", 5: "5.00", 0.1: "0.10", 0.035: "0.035", 0.0004: "0.0004", 0.00004: "0.00", 1234.5: "1234.50"} {
		assert.Equal(t, want, usd(v), "usd(%v)", v)
	}
}

func TestStatusCommandShowsSpend(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC))
	sim := spendSim(t, clock.now)
	addr := serveAt(t, spendConfig(sim, t.TempDir()), clock)
	spendUntilRefused(t, addr)
	var out strings.Builder
	require.NoError(t, runStatus(t.Context(), []string{"-url", "http://" + addr, "-token", proxyToken}, &out, io.Discard))
	assert.Regexp(t, `openai/paid\s+0\.45 of 0\.45\s+0\.45 of 10\.00\n`, out.String())
}

// serveAt runs the proxy for conf as serveReal does, on the clock.
func serveAt(t *testing.T, conf string, clock *testClock) string {
	t.Helper()
	return serveSettings(t, clocked(t, conf, clock))
}

// clocked returns the settings of conf, on the clock.
func clocked(t *testing.T, conf string, clock *testClock) *settings {
	t.Helper()
	c, err := parseConfig([]byte(conf), "keypool.yaml")
	require.NoError(t, err)
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	s.clock = clock.now
	return s
}

// A model without a price goes to keys without a budget, and waits for
// them; with only budgeted keys to take it, the proxy refuses it as the
// client's mistake (400), naming the price it lacks, and sends nothing.
func TestProxyRefusesAModelWithoutAPriceForBudgetedKeys(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	sim := spendSim(t, clock.now)
	send := func(addr string) (int, string) {
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	addr := serveAt(t, spendConfig(sim, t.TempDir()), clock)
	for i := range 2 {
		status, _ := send(addr)
		require.Equal(t, http.StatusOK, status, "request %d, on the free key", i)
	}
	status, body := send(addr)
	assert.Equal(t, http.StatusTooManyRequests, status, "the free key is back tomorrow; the paid key never takes it")
	assert.Contains(t, body, `"retry_at":"2026-03-11T12:00:00Z"`)

	paidOnly := fmt.Sprintf("proxy_tokens: [%q]\nstate: %s\nupstreams:\n  - name: openai\n    url: %s\n"+
		"    prices: {gpt-4o-mini: {input: 1000, output: 1000}}\n"+
		"    keys: [{id: paid, secret: sk-spend-paid, paid: true, budget: {per_day: 0.25}}]\n", proxyToken, t.TempDir(), sim.URL())
	status, body = send(serveAt(t, paidOnly, clock))
	assert.Equal(t, http.StatusBadRequest, status)
	assert.Contains(t, body, `model \"gpt-4o\" has no price`)
	assert.Equal(t, int64(2), sim.Totals().Served, "nothing more was sent")
}

// keypool reset-spend gives a spent budget its room again on a running
// proxy, for the operator who says so, and logs who did.
func TestResetSpendCommand(t *testing.T) {
	clock := newTestClock(time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC))
	sim := spendSim(t, clock.now)
	addr := serveAt(t, spendConfig(sim, t.TempDir()), clock)
	served, _, _ := spendUntilRefused(t, addr)
	require.Equal(t, 5, served, "the free key's 2, then the paid key's 3")
	t.Setenv("KEYPOOL_PROXY_TOKEN", proxyToken)

	status, stdout, stderr := runKeypool(t, "reset-spend", "-url", "http://"+addr, "openai/paid")
	require.Equal(t, 0, status, "stderr: %s", stderr)
	assert.Contains(t, stdout, "Reset the spend of paid of route openai")
	k := statusKeys(t, addr)["paid"]
	require.NotNil(t, k.Spend)
	assert.Zero(t, k.Spend.Today)
	assert.Equal(t, "serving", k.State)
	status, _, _ = spendRequest(t, addr)
	assert.Equal(t, http.StatusOK, status, "the budget has its room again")

	status, _, stderr = runKeypool(t, "reset-spend", "-url", "http://"+addr, "openai/nope")
	assert.Equal(t, 1, status)
	assert.Contains(t, stderr, `no key "nope" in a route "openai"`)
	status, _, stderr = runKeypool(t, "reset-spend", "-url", "http://"+addr)
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, stderr, "give the key as ROUTE/KEY")
}
