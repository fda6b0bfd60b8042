package keypool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// The soak: soakWorkers goroutines at once send soakRounds rounds of one
// request each through a pool on a Badger store, to a vendor that answers
// at random with throttles, server errors and revoked-key errors. Within a
// round the clock stands still, so the pool and the vendor see one time;
// between rounds it moves on by soakStep.
const (
	soakKeys    = 40
	soakWorkers = 200
	soakRounds  = 100
	soakStep    = 3 * time.Second
	// soakBudget is the most real time the soak takes: it starts no round
	// after it.
	soakBudget = 20 * time.Second
)

// soakLimits are each key's windows in the pool. The vendor sets none of
// its own, so what it accepts shows what the pool let through.
var soakLimits = Limits{RPM: 60, RPD: 250, TPM: 1 << 30}

// soakScript returns a key's scripted answers: a throttle for 5% of
// requests, a revoked-key error for 1%, and otherwise the vendor's own
// answer (a fault for 3%, as FaultRate says).
func soakScript(rng *rand.Rand, n int) []vendorsim.Answer {
	script := make([]vendorsim.Answer, n)
	for i := range script {
		switch p := rng.Float64(); {
		case p < 0.05:
			script[i] = vendorsim.Answer{Status: http.StatusTooManyRequests,
				Header: http.Header{"Retry-After": {fmt.Sprint(1 + rng.IntN(90))}, "Content-Type": {"application/json"}},
				Body:   `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`}
		case p < 0.06:
			script[i] = vendorsim.Answer{Status: http.StatusUnauthorized, Header: http.Header{"Content-Type": {"application/json"}},
				Body: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`}
		}
	}
	return script
}

// soakResult is what one request of the soak got.
type soakResult struct {
	status int
	err    error
}

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak takes seconds")
	}
	before := goleak.IgnoreCurrent()
	figures := soak(t)
	// After Close, nothing the soak started is left running: the vendor's
	// server, the client's connections, the pool and the Badger store.
	goleak.VerifyNone(t, before)
	t.Logf("soak: %s", figures)
}

// soak runs the soak, checks what it can while the pool is open, closes
// everything and returns its figures.
func soak(t *testing.T) string {
	clock := newTestClock()
	rng := rand.New(rand.NewPCG(11, 1))
	keys := make([]Key, soakKeys)
	simKeys := make([]vendorsim.Key, soakKeys)
	for i := range keys {
		keys[i] = Key{Secret: fmt.Sprintf("sk-soak-%02d", i), ID: fmt.Sprintf("k%02d", i)}
		simKeys[i] = vendorsim.Key{Secret: keys[i].Secret, ID: keys[i].ID, FaultRate: 0.03,
			Script: soakScript(rng, 2*soakRounds*soakWorkers/soakKeys)}
	}
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: simKeys, Clock: clock.Now, Seed: 11})
	defer sim.Close()
	dir := t.TempDir()
	var storeErrs atomic.Int64
	store, err := OpenBadgerStore(dir, WithFlushInterval(20*time.Millisecond),
		WithStoreErrors(func(error) { storeErrs.Add(1) }))
	require.NoError(t, err)
	defer store.Close()
	var ev evictions
	pool, err := New("openai", keys, WithStore(store), WithClock(clock.Now), WithLimits(soakLimits),
		WithBenches(Benches{Auth: 3 * time.Minute}), OnEvict(ev.add))
	require.NoError(t, err)
	defer pool.Close()
	base := &http.Transport{MaxIdleConnsPerHost: soakWorkers}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: pool.Transport(base)}

	ctx, cancel := context.WithTimeout(t.Context(), 2*soakBudget)
	defer cancel()
	var results []soakResult
	var mu sync.Mutex
	var issued atomic.Int64
	var heapWarm, heapEnd uint64
	start := time.Now()
	rounds := 0
	for ; rounds < soakRounds && time.Since(start) < soakBudget; rounds++ {
		var wg sync.WaitGroup
		for w := range soakWorkers {
			wg.Go(func() {
				issued.Add(1)
				r := soakRequest(ctx, client, sim.URL(), rounds*soakWorkers+w)
				mu.Lock()
				results = append(results, r)
				mu.Unlock()
			})
		}
		wg.Wait()
		clock.Advance(soakStep)
		if rounds == soakRounds/2-1 {
			heapWarm = heapInUse()
		}
	}
	elapsed := time.Since(start)
	heapEnd = heapInUse()
	if rounds < soakRounds {
		t.Logf("soak: stopped after %d of %d rounds, at the budget of %v", rounds, soakRounds, soakBudget)
	}

	// Every request got exactly one answer or one error; every answer the
	// vendor accepted reached one caller; every attempt the pool sent
	// reached the vendor.
	byStatus := map[int]int{}
	noKey := 0
	for _, r := range results {
		var na *NoAvailableKeyError
		switch {
		case r.err == nil:
			byStatus[r.status]++
		case errors.As(r.err, &na):
			noKey++
		default:
			t.Errorf("request failed with %v", r.err)
		}
	}
	require.Equal(t, int(issued.Load()), len(results), "requests with one outcome each")
	totals := sim.Totals()
	var sent int64
	for _, ks := range pool.Stats() {
		sent += ks.Sent
	}
	assert.Equal(t, totals.Requests, sent, "attempts the pool sent, against answers the vendor gave")
	assert.Equal(t, totals.Served, int64(byStatus[http.StatusOK]), "answers the vendor accepted, against 200s callers got")

	// No window admitted more than its limit.
	for _, k := range keys {
		assert.LessOrEqual(t, sim.MaxInWindow(k.ID, time.Minute), int(soakLimits.RPM), "key %s: requests in a minute", k.ID)
		assert.LessOrEqual(t, sim.MaxInWindow(k.ID, 24*time.Hour), int(soakLimits.RPD), "key %s: requests in a day", k.ID)
	}

	// Nothing is lost: a restart resumes with the same windows and benches,
	// though some writes of benches failed and were made again later.
	at := clock.Now()
	stats := pool.Stats()
	base.CloseIdleConnections()
	sim.Close()
	require.NoError(t, pool.Close())
	require.NoError(t, store.Close())
	store, err = OpenBadgerStore(dir)
	require.NoError(t, err)
	defer store.Close()
	pool, err = New("openai", keys, WithStore(store), WithClock(clock.Now), WithLimits(soakLimits))
	require.NoError(t, err)
	defer pool.Close()
	restarted := pool.Stats()
	for i := range stats {
		assert.Equal(t, stats[i].Bench, restarted[i].Bench, "key %s bench after a restart", stats[i].ID)
		assert.Equal(t, stats[i].Models, restarted[i].Models, "key %s windows and benches after a restart", stats[i].ID)
	}
	require.Equal(t, at, clock.Now())

	// No bench outlives its end.
	var last time.Time
	benches := map[Kind]int{}
	for _, e := range ev.all() {
		benches[e.Kind]++
		if e.Until.After(last) {
			last = e.Until
		}
	}
	require.NotEmpty(t, ev.all(), "the vendor's failures benched keys")
	clock.Advance(last.Sub(clock.Now()) + time.Nanosecond)
	for _, ks := range pool.Stats() {
		assert.Zero(t, ks.Bench, "key %s benched after its bench ended", ks.ID)
		for _, m := range ks.Models {
			assert.Zero(t, m.Bench, "key %s benched for %s after its bench ended", ks.ID, m.Model)
		}
	}
	require.NoError(t, pool.Close())
	require.NoError(t, store.Close())

	// Memory is flat: the heap at the end is about what it was after the
	// first half.
	assert.LessOrEqual(t, heapEnd, heapWarm+heapWarm/2+8<<20, "heap in use: %d bytes after the first half, %d at the end", heapWarm, heapEnd)

	return fmt.Sprintf("%d requests in %d rounds of %d goroutines in %v (%v of the pool's clock): answers by status %v, "+
		"%d with no key available; the vendor gave %d answers (%d served, %d throttled, %d revoked, %d faults); "+
		"benches by kind %v; %d failed writes of the store reported; heap in use %.1f MiB after the first half, %.1f MiB at the end",
		len(results), rounds, soakWorkers, elapsed.Round(time.Millisecond), time.Duration(rounds)*soakStep, byStatus,
		noKey, totals.Requests, totals.Served, totals.RateLimited, totals.Unauthorized, totals.ServerErrors,
		benches, storeErrs.Load(), float64(heapWarm)/(1<<20), float64(heapEnd)/(1<<20))
}

// soakRequest sends the n-th request of the soak and reads its answer.
func soakRequest(ctx context.Context, client *http.Client, base string, n int) soakResult {
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":50,"messages":[{"role":"user","content":"request %d"}]}`, n)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return soakResult{err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return soakResult{err: err}
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return soakResult{err: err}
	}
	return soakResult{status: resp.StatusCode}
}

// heapInUse returns the bytes of heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
