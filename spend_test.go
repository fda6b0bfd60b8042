package keypool

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
