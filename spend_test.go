package keypool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/refusal"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// Two free keys, then a paid key with a budget of $0.05 a day at $10 per
// million input tokens and $30 per million output: the free keys serve
// first, the paid key until its day's spend reaches the budget, then
// requests fail until the next calendar day, when it serves again.
func TestBudgetHoldsThePaidKeysSpend(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			clock := newTestClock()
			sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now, OutputTokens: 60,
				Keys: []vendorsim.Key{{Secret: "sk-free-1", ID: "free-1"}, {Secret: "sk-free-2", ID: "free-2"}, {Secret: "sk-paid", ID: "paid"}}})
			t.Cleanup(sim.Close)
			budget := Budget{PerDay: 0.05}
			pool, err := New("openai", []Key{
				{Secret: "sk-free-1", ID: "free-1", Limits: Limits{RPD: 5}},
				{Secret: "sk-free-2", ID: "free-2", Limits: Limits{RPD: 5}},
				{Secret: "sk-paid", ID: "paid", Paid: true, Budget: budget},
			}, WithClock(clock.Now), WithCalendarDay(0, time.UTC), WithPrices(map[string]Price{"gpt-4o": {Input: 10, Output: 30}}))
			require.NoError(t, err)
			client := &http.Client{Transport: pool.Transport(nil)}
			body := `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("hello ", 60) + `"}]}`
			if stream {
				body = strings.Replace(body, `"model"`, `"stream":true,"stream_options":{"include_usage":true},"model"`, 1)
			}
			send := func() (string, error) {
				resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					return "", err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.Header.Get("X-Sim-Key"), nil
			}
			served := map[string]int{}
			var na *NoAvailableKeyError
			for i := range 200 {
				_, err := send()
				if errors.As(err, &na) {
					break
				}
				require.NoError(t, err, "request %d", i)
				clock.Advance(time.Second)
			}
			require.NotNil(t, na, "the paid key's budget ran out")
			for _, ks := range sim.Stats() {
				served[ks.ID] = int(ks.Counts.Requests)
			}
			assert.Equal(t, 5, served["free-1"], "the free keys serve first")
			assert.Equal(t, 5, served["free-2"])
			assert.Positive(t, served["paid"], "then the paid key")
			midnight := time.Date(clock.Now().Year(), clock.Now().Month(), clock.Now().Day()+1, 0, 0, 0, 0, time.UTC)
			assert.Equal(t, midnight, na.RetryAt.UTC(), "back the next calendar day (the free keys' RPD slides, the budget's day does not)")

			var paid KeyStats
			for _, ks := range pool.Stats() {
				if ks.ID == "paid" {
					paid = ks
				}
			}
			// What one request spends: the sim counts a prompt as its
			// length / 4 tokens and answers 60 tokens; the pool estimates
			// the prompt as its bytes / 4 and reserves the 100 max_tokens.
			perRequest := float64(len(body)/4)*10/1e6 + 60*30/1e6
			assert.LessOrEqual(t, paid.Spent.PerDay, budget.PerDay, "never above the budget: each estimate covers what was spent")
			assert.GreaterOrEqual(t, paid.Spent.PerDay, budget.PerDay-2*perRequest-0.003, "the budget is used, not left idle: spent %.4f", paid.Spent.PerDay)
			assert.InDelta(t, float64(served["paid"])*perRequest, paid.Spent.PerDay, 1e-5,
				"what the vendor reported, input at its price and output at its own")
			assert.Equal(t, paid.Budget, budget)
			t.Logf("paid key: %d requests, spent $%.4f of $%.2f", served["paid"], paid.Spent.PerDay, budget.PerDay)

			clock.Advance(na.RetryAt.Sub(clock.Now()))
			_, err = send()
			require.NoError(t, err, "the next day the paid key serves again")
		})
	}
}

// budgetRun is one run of budgetUnderLoad: what the vendor billed, by its
// own usage reports, and what the pool recorded.
type budgetRun struct {
	billed   float64 // US dollars, from the answers' usage at the test's price
	answers  int
	maxOne   float64 // the dearest answer
	recorded float64 // the key's Spent.PerDay
	// mostAtOnce is the most requests the vendor had at once.
	mostAtOnce int
}

// budgetPrice is what the runs below price gpt-4o-mini at, in US dollars
// per million tokens.
var budgetPrice = Price{Input: 0.15, Output: 0.60}

// budgetUnderLoad sends requests from workers goroutines at once, each
// until the pool refuses it for a spent budget, to a vendor that writes
// output tokens per answer (or the request's max_tokens, when fewer),
// through a pool of one key with a day budget of $1.00 at price. A request
// refused while others are in flight, which may hold the budget, tries
// again once another has ended: as a client would, told to retry soon.
// body is the request.
func budgetUnderLoad(t *testing.T, workers int, output int64, price Price, body string) budgetRun {
	t.Helper()
	clock := newTestClock()
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now, OutputTokens: output,
		Keys: []vendorsim.Key{{Secret: "sk-paid", ID: "paid"}}})
	t.Cleanup(sim.Close)
	pool, err := New("openai", []Key{{Secret: "sk-paid", ID: "paid", Paid: true, Budget: Budget{PerDay: 1}}},
		WithClock(clock.Now), WithCalendarDay(0, time.UTC), WithPrices(map[string]Price{"gpt-4o-mini": price}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	base := &http.Transport{MaxIdleConnsPerHost: workers}
	t.Cleanup(base.CloseIdleConnections)

	var (
		mu       sync.Mutex
		run      budgetRun
		inFlight int                   // requests the pool sent that have not ended
		ended    = make(chan struct{}) // closed, and made again, when one ends
	)
	sent := func() {
		mu.Lock()
		defer mu.Unlock()
		inFlight++
		run.mostAtOnce = max(run.mostAtOnce, inFlight)
	}
	current := func() (chan struct{}, int) {
		mu.Lock()
		defer mu.Unlock()
		return ended, inFlight
	}
	end := func(cost float64) {
		mu.Lock()
		defer mu.Unlock()
		run.billed += cost
		run.answers++
		run.maxOne = max(run.maxOne, cost)
		inFlight--
		close(ended)
		ended = make(chan struct{})
	}
	client := &http.Client{Transport: pool.Transport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		sent()
		return base.RoundTrip(r)
	}))}
	send := func() (again bool, err error) {
		wait, _ := current()
		resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
		var na *NoAvailableKeyError
		if errors.As(err, &na) {
			if _, n := current(); n == 0 {
				return false, nil // refused with nothing in flight: the budget is spent
			}
			<-wait // requests in flight may hold the budget: try again once one has ended
			return true, nil
		}
		var own *refusal.Error
		if errors.As(err, &own) {
			return false, nil // the request itself cannot go: its bound costs more than the budget
		}
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		var answer struct {
			Usage struct {
				Prompt     int64 `json:"prompt_tokens"`
				Completion int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			return false, fmt.Errorf("status %d: %w", resp.StatusCode, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close() // settles, before the request counts as ended
		u := answer.Usage
		end((float64(u.Prompt)*price.Input + float64(u.Completion)*price.Output) / 1e6)
		return true, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for range 10_000 { // a bound, never reached: the budget ends each loop first
				again, err := send()
				if err != nil {
					errs <- err
					return
				}
				if !again {
					return
				}
			}
			errs <- errors.New("a worker never saw the budget spent")
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, ks := range pool.Stats() {
		run.recorded = ks.Spent.PerDay
	}
	return run
}

// budgetBody is a chat request for gpt-4o-mini, with ", max_tokens" the
// text of extra when it is not empty.
func budgetBody(extra string) string {
	return `{"model":"gpt-4o-mini",` + extra + `"messages":[{"role":"user","content":"write a long story"}]}`
}

// A day budget of $1.00 holds under 150 requests at once: the pool
// reserves what each request can cost at most — its max_tokens, whatever
// its size, or, when it states none, all that is left of the budget — and
// counts what requests in flight reserve against what is left. Before, the
// pool reserved 1,024 output tokens for a request without max_tokens and
// at most 32,768 for any request: at gpt-4o's prices, 150 requests spent
// $3.98 and $3.00 of the $1.00.
//
// The bound (see Budget): spend passes the cap only by what answers report
// beyond their reserves. Here a request's input is estimated at its prompt
// text's bytes over four, and the sim counts the whole body's bytes over
// four; so each answer may pass its reserve by that difference, and an
// answer to a request without max_tokens, which runs alone, by what it
// cost beyond all that was left — at most one answer's cost.
func TestBudgetHoldsUnderConcurrentRequests(t *testing.T) {
	const workers = 150
	gpt4o := Price{Input: 2.50, Output: 10}
	cases := []struct {
		name      string
		price     Price
		extra     string
		output    int64 // what the vendor writes, when max_tokens allows
		unbounded bool  // nothing bounds the request's output
		refused   bool  // its bound costs more than the budget: never sent
	}{
		{"gpt-4o with MaxOutput 4096, no max_tokens, the vendor writes 4096", Price{Input: 2.50, Output: 10, MaxOutput: 4096}, "", 4096, false, false},
		{"gpt-4o, no max_tokens, the vendor writes 4096", gpt4o, "", 4096, true, false},
		{"gpt-4o, max_tokens 100000, the vendor writes all of it", gpt4o, `"max_tokens":100000,`, 100000, false, true},
		{"gpt-4o-mini, no max_tokens, the vendor writes 4096", budgetPrice, "", 4096, true, false},
		{"gpt-4o-mini, max_tokens 100000, the vendor writes 4096", budgetPrice, `"max_tokens":100000,`, 4096, false, false},
		{"gpt-4o-mini, max_tokens 100000, the vendor writes all of it", budgetPrice, `"max_tokens":100000,`, 100000, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := budgetBody(c.extra)
			run := budgetUnderLoad(t, workers, c.output, c.price, body)
			// What each answer may count beyond its reserve's input: the
			// sim's prompt tokens less the pool's estimate, and a
			// millionth of a dollar of rounding.
			info := scanRequest([]byte(body), nil)
			estimated := DefaultEstimate(RequestInfo{PromptBytes: info.PromptBytes, Images: info.Images}) - defaultReservedOutput
			beyond := float64(max(int64(len(body))/4-estimated, 0))*c.price.Input/1e6 + 1e-6
			bound := float64(run.answers) * beyond
			if c.unbounded {
				bound += run.maxOne
			}
			t.Logf("%d answers billed $%.6f (recorded $%.6f); the bound allows $%.6f", run.answers, run.billed, run.recorded, 1+bound)
			assert.LessOrEqual(t, run.billed, 1+bound, "spend within the cap and the documented bound")
			assert.InDelta(t, run.billed, run.recorded, float64(run.answers)*1e-6+1e-9, "the pool recorded what the vendor billed")
			if c.refused {
				assert.Zero(t, run.answers, "a request that can cost more than the budget is never sent")
				return
			}
			if !c.unbounded {
				// (That one without a bound runs alone is storetest's
				// UnboundedTakesAllThatIsLeft: the test's own count of
				// what is in flight overlaps a settle.)
				assert.Greater(t, run.mostAtOnce, 1, "bounded requests run side by side")
			}
			reserve := float64(c.output)
			if c.extra != "" {
				reserve = 100_000
			}
			if c.unbounded {
				reserve = defaultReservedOutput
			}
			assert.Greater(t, run.billed, 1-2*reserve*c.price.Output/1e6, "and the budget was spent, not refused early")
		})
	}
}

// budgetPool returns a pool of one key with a day budget of $1.00 at
// price for gpt-4o, on a clock stopped at noon, and a client of it.
func budgetPool(t *testing.T, price Price) (*Pool, *http.Client, *testClock) {
	t.Helper()
	clock := newTestClock()
	pool, err := New("openai", []Key{{Secret: "sk-a", ID: "a", Budget: Budget{PerDay: 1}}},
		WithClock(clock.Now), WithCalendarDay(0, time.UTC), WithPrices(map[string]Price{"gpt-4o": price}))
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	return pool, &http.Client{Transport: pool.Transport(nil)}, clock
}

// An answer counts no more than its request could have used: output within
// the request's bound (its max_tokens, or the model's MaxOutput), and
// input and output each within 2^24 tokens, however much the vendor
// reports — a broken report of billions of dollars spends what the request
// could have cost, not the month's budget.
func TestAnswerCountsAtMostWhatItsRequestCouldUse(t *testing.T) {
	cases := []struct {
		name    string
		price   Price
		request string
		usage   string
		want    int64 // millionths of a dollar
	}{
		{"within its bound", Price{Input: 1, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":10,"completion_tokens":60}`, 10 + 60*2},
		{"output beyond max_tokens counts max_tokens", Price{Input: 1, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":10,"completion_tokens":4096}`, 10 + 100*2},
		{"output beyond MaxOutput counts MaxOutput", Price{Input: 1, Output: 2, MaxOutput: 500}, ``,
			`{"prompt_tokens":10,"completion_tokens":4096}`, 10 + 500*2},
		{"billions of output tokens count max_tokens", Price{Input: 1, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":10,"completion_tokens":9000000000000}`, 10 + 100*2},
		{"billions of input tokens count 2^24", Price{Input: 0.01, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":9000000000000,"completion_tokens":1}`, 167773 + 2}, // 2^24 at a cent per million, rounded up
		{"negative counts are no report: the reserve stands", Price{Input: 1, Output: 2}, `"max_tokens":100`,
			`{"prompt_tokens":-5,"completion_tokens":-7}`, 2 + 100*2}, // "user" and "hi" are 2 tokens of input
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, srv := newVendor(t)
			pool, client, _ := budgetPool(t, c.price)
			v.on("sk-a", answer{status: 200, header: map[string]string{"Content-Type": "application/json"},
				body: `{"usage":` + c.usage + `}`})
			body := `{"model":"gpt-4o",`
			if c.request != "" {
				body += c.request + ","
			}
			body += `"messages":[{"role":"user","content":"hi"}]}`
			resp, err := client.Post(srv.URL, "application/json", strings.NewReader(body))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close())
			assert.InDelta(t, fromMicros(c.want), pool.Stats()[0].Spent.PerDay, 1e-9)
		})
	}
}

// A request refused because what requests in flight reserve fills the
// budget is told to retry a second later, not when the day ends; once they
// settle it goes through. Pool.Do names no max_tokens: without the model's
// MaxOutput, a call reserves all that is left of the budget.
func TestBudgetHeldByRequestsInFlightRetriesSoon(t *testing.T) {
	pool, _, clock := budgetPool(t, Price{Input: 1, Output: 2})
	err := pool.Do(t.Context(), "gpt-4o", func(ctx context.Context, _ Key) error {
		inner := pool.Do(ctx, "gpt-4o", func(context.Context, Key) error { return nil })
		var na *NoAvailableKeyError
		require.ErrorAs(t, inner, &na, "the first call reserves all that is left")
		assert.Equal(t, clock.Now().Add(reservedRetry), na.RetryAt, "retry when the first may have settled")
		Settle(ctx, 100, 100)
		return nil
	})
	require.NoError(t, err)
	assert.InDelta(t, 300e-6, pool.Stats()[0].Spent.PerDay, 1e-9, "the first spent what it used, and gave the rest back")
	require.NoError(t, pool.Do(t.Context(), "gpt-4o", func(context.Context, Key) error { return nil }))
}

// A request whose bound costs more than a whole budget of every key is
// the request's own fault, said at once, not a wait until a next day that
// never has room for it.
func TestRequestDearerThanAWholeBudgetIsRefused(t *testing.T) {
	v, srv := newVendor(t)
	_, client, _ := budgetPool(t, Price{Input: 2.5, Output: 10})
	_, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"model":"gpt-4o","max_tokens":200000,"messages":[]}`))
	var own *refusal.Error
	require.ErrorAs(t, err, &own)
	assert.ErrorContains(t, err, `a request for model "gpt-4o" can cost up to $2.000000`)
	var na *NoAvailableKeyError
	assert.False(t, errors.As(err, &na), "not a wait")
	assert.Empty(t, v.received())
}

// A budget below a millionth of a dollar, the unit spend is counted in,
// would cap nothing: it is a mistake in the configuration, not "no cap".
func TestBudgetBelowTheCountingUnitIsAnError(t *testing.T) {
	prices := WithPrices(map[string]Price{"m": {Input: 1}})
	cases := []struct {
		name string
		keys []Key
		opts []Option
		want string
	}{
		{"a key's day", []Key{{Secret: "sk-a", Budget: Budget{PerDay: 4e-7}}}, []Option{prices}, "below a millionth of a dollar"},
		{"a key's month", []Key{{Secret: "sk-a", Budget: Budget{PerMonth: 1e-9}}}, []Option{prices}, "below a millionth of a dollar"},
		{"an account's", []Key{{Secret: "sk-a", Account: "org"}}, []Option{prices, WithAccountBudget("org", Budget{PerDay: 5e-7})}, "below a millionth of a dollar"},
		{"a negative MaxOutput", []Key{{Secret: "sk-a"}}, []Option{WithPrices(map[string]Price{"m": {MaxOutput: -1}})}, "negative MaxOutput"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New("openai", c.keys, c.opts...)
			assert.ErrorContains(t, err, c.want)
		})
	}
	_, err := New("openai", []Key{{Secret: "sk-a", Budget: Budget{PerDay: 1e-6}}}, prices)
	assert.NoError(t, err, "a millionth of a dollar is a cap")
}

// ResetSpend gives a budget all its room again — an operator's answer to a
// report that was wrong, or to reservations left by a process that ended —
// for the key and its account; a store that cannot reset spend says so.
func TestResetSpendGivesTheBudgetItsRoomAgain(t *testing.T) {
	clock := newTestClock()
	pool, err := New("openai", []Key{{Secret: "sk-a", ID: "a", Account: "org", Budget: Budget{PerDay: 0.001}}},
		WithClock(clock.Now), WithPrices(map[string]Price{"m": {Input: 1, Output: 1, MaxOutput: 100}}),
		WithAccountBudget("org", Budget{PerDay: 0.001}))
	require.NoError(t, err)
	spendAll := func() error {
		return pool.Do(t.Context(), "m", func(ctx context.Context, _ Key) error {
			Settle(ctx, 900, 100)
			return nil
		})
	}
	require.NoError(t, spendAll())
	var na *NoAvailableKeyError
	require.ErrorAs(t, spendAll(), &na, "the day's $0.001 is spent")
	require.NoError(t, pool.ResetSpend(t.Context(), "a"))
	st := pool.Stats()[0]
	assert.Zero(t, st.Spent.PerDay)
	assert.Zero(t, st.AccountSpent.PerDay, "the account's spend too")
	assert.NoError(t, spendAll())
	assert.ErrorContains(t, pool.ResetSpend(t.Context(), "nope"), `no key with ID "nope"`)

	plain, err := New("openai", []Key{{Secret: "sk-a"}}, WithStore(struct{ Store }{NewMemoryStore()}))
	require.NoError(t, err)
	assert.ErrorContains(t, plain.ResetSpend(t.Context(), plain.keys[0].ID), "cannot reset spend")
}

// Unbench lifts what one answer set for a key of an account: the
// account's day, which the vendor stated spent, with the limit it stated.
func TestUnbenchLiftsAnAccountsStatedDay(t *testing.T) {
	clock := newTestClock()
	pool, err := New("openai", []Key{{Secret: "sk-a", ID: "a", Account: "org"}, {Secret: "sk-b", ID: "b", Account: "org"}},
		WithClock(clock.Now), WithAccountLimits("org", Limits{RPD: 1000}))
	require.NoError(t, err)
	require.NoError(t, pool.store.Learn(t.Context(), Stated{Provider: "openai", KeyID: "a", Account: "org", Model: "m",
		Limits: Limits{RPD: 1}, Used: Limits{RPM: -1, TPM: -1, RPD: 1, TPD: -1}, Now: clock.Now()}))
	call := func() error { return pool.Do(t.Context(), "m", func(context.Context, Key) error { return nil }) }
	var na *NoAvailableKeyError
	require.ErrorAs(t, call(), &na, "one answer said the account's day is spent")
	require.NoError(t, pool.Unbench(t.Context(), "a"))
	assert.NoError(t, call(), "lifted by the operator")
	assert.NoError(t, call(), "with the day limit it stated")
}
