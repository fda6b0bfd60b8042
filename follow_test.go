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

// following is a run against a vendor that enforces and states its limits,
// at twice the capacity it offers, for ten minutes of a simulated clock.
type following struct {
	keys     []vendorsim.Key
	accounts map[string]vendorsim.Limits
	capacity int64 // what the vendor's limits allow over the run
	opts     []Option
}

// result is what the vendor saw of a following run.
type result struct {
	served  int64
	refused map[string]int64 // the vendor's 429s, by key
	max     map[string]int   // the most requests any minute of a key or account admitted
}

func (f following) run(t *testing.T) result {
	t.Helper()
	const run = 10 * time.Minute
	clock := newTestClock()
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now, OutputTokens: 5,
		Keys: f.keys, Accounts: f.accounts})
	t.Cleanup(sim.Close)
	var keys []Key
	for _, k := range f.keys {
		keys = append(keys, Key{Secret: k.Secret, ID: k.ID, Account: k.Account})
	}
	pool, err := New("openai", keys, append([]Option{WithClock(clock.Now)}, f.opts...)...)
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	every := time.Duration(int64(run) / (2 * f.capacity)) // twice the capacity
	var r result
	for elapsed := time.Duration(0); elapsed < run; elapsed += every {
		resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		var na *NoAvailableKeyError
		switch {
		case errors.As(err, &na):
		case err != nil:
			t.Fatal(err)
		default:
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				r.served++
			}
		}
		clock.Advance(every)
	}
	r.refused, r.max = map[string]int64{}, map[string]int{}
	for _, ks := range sim.Stats() {
		r.refused[ks.ID] = ks.Counts.RateLimited
		r.max[ks.ID] = sim.MaxInWindow(ks.ID, time.Minute)
	}
	for name := range f.accounts {
		r.max[name] = sim.MaxInWindow(name, time.Minute)
	}
	t.Logf("served %d of %d (%.1f%%); the vendor's 429s by key %v; most in a minute %v",
		r.served, f.capacity, 100*float64(r.served)/float64(f.capacity), r.refused, r.max)
	return r
}

// A vendor that enforces RPM 10 per key and states it on every answer: the
// pool follows it whatever it was told — at most one refused request per key
// in ten minutes, and at least 95% of what the vendor offers served.
func TestPoolFollowsTheVendorsLimits(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
	}{
		{"configured above the vendor's", []Option{WithLimits(Limits{RPM: 20})}},
		{"nothing configured", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := following{capacity: 3 * 10 * 10, opts: tt.opts}
			for i := range 3 {
				id := fmt.Sprintf("k%d", i)
				f.keys = append(f.keys, vendorsim.Key{Secret: "sk-" + id, ID: id, Limits: vendorsim.Limits{RPM: 10}})
			}
			r := f.run(t)
			for id, n := range r.refused {
				assert.LessOrEqual(t, n, int64(1), "key %s: the vendor refused %d requests", id, n)
			}
			assert.GreaterOrEqual(t, float64(r.served), 0.95*float64(f.capacity), "served %d of %d", r.served, f.capacity)
		})
	}
}

// Two keys of one account, which the vendor limits to RPM 10 together: the
// pool never sends the account more, whether told or learning it.
func TestPoolKeepsAnAccountWithinItsLimits(t *testing.T) {
	for _, tt := range []struct {
		name    string
		opts    []Option
		refused int64
	}{
		{"configured", []Option{WithAccountLimits("org", Limits{RPM: 10})}, 0},
		{"learned", nil, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := following{capacity: 10 * 10, opts: tt.opts, accounts: map[string]vendorsim.Limits{"org": {RPM: 10}},
				keys: []vendorsim.Key{{Secret: "sk-a", ID: "a", Account: "org"}, {Secret: "sk-b", ID: "b", Account: "org"}}}
			r := f.run(t)
			assert.LessOrEqual(t, r.refused["a"]+r.refused["b"], tt.refused, "the vendor's 429s")
			assert.LessOrEqual(t, r.max["org"], 10, "the account's most requests in a minute")
			assert.GreaterOrEqual(t, float64(r.served), 0.95*float64(f.capacity), "served %d of %d", r.served, f.capacity)
		})
	}
}
