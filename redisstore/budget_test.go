package redisstore_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// Two replicas — two pools, each over its own Redis store and client —
// share one paid key's budget: together they never spend more than it.
func TestReplicasShareOneBudget(t *testing.T) {
	f := newFakeRedis(t)
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, OutputTokens: 60,
		Keys: []vendorsim.Key{{Secret: "sk-paid", ID: "paid"}}})
	t.Cleanup(sim.Close)
	budget := keypool.Budget{PerDay: 0.02}
	var pools []*keypool.Pool
	for range 2 {
		pool, err := keypool.New("openai", []keypool.Key{{Secret: "sk-paid", ID: "paid", Paid: true, Budget: budget}},
			keypool.WithStore(newStore(t, f.client(t))), keypool.WithPrices(map[string]keypool.Price{"gpt-4o": {Input: 10, Output: 30}}))
		require.NoError(t, err)
		pools = append(pools, pool)
	}
	body := `{"model":"gpt-4o","max_tokens":100,"messages":[{"role":"user","content":"` + strings.Repeat("hello ", 60) + `"}]}`
	var served atomic.Int64
	var wg sync.WaitGroup
	for _, p := range pools {
		client := &http.Client{Transport: p.Transport(nil)}
		for range 4 {
			wg.Go(func() {
				for range 40 {
					resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err != nil {
						return // the budget is spent
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					served.Add(1)
				}
			})
		}
	}
	wg.Wait()
	for _, p := range pools {
		require.NoError(t, p.Close()) // settles what is queued
	}
	st, err := newStore(t, f.client(t)).State(t.Context(), "openai", "paid", time.Now())
	require.NoError(t, err)
	t.Logf("served %d, spent $%.4f of $%.2f", served.Load(), st.Spent.PerDay, budget.PerDay)
	assert.LessOrEqual(t, st.Spent.PerDay, budget.PerDay, "together the replicas never spend more than the budget")
	assert.Positive(t, served.Load())
	assert.Equal(t, served.Load(), sim.Totals().Served, "every request the vendor served was counted")
}
