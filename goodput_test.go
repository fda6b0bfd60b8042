package keypool

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// goodput is what a run of the goodput workload gave.
type goodput struct {
	capacity int64 // what the keys' vendor limits allow over the run
	sent     int64 // requests that reached the vendor
	served   int64 // answers 200
	vendor   int64 // answers 429 from the vendor
	failed   int64 // calls that failed: no key, or an error status
	// failedWithRoom counts failed calls made while some key still had room
	// at the vendor, beyond the ExactGuard the pool keeps past a window's
	// span; inGuard those made while a key's room at the vendor had come
	// less than ExactGuard before. The workload's calls fall on exact
	// ticks of its clock, so each minute a slot frees at the very tick a
	// call is made: the guard refuses it, and the next tick's call takes
	// the slot (the keys' capacity is served all the same).
	failedWithRoom, inGuard int64
}

func (g goodput) String() string {
	return fmt.Sprintf("served %d of %d (%.1f%%), vendor 429 %d of %d sent (%.2f%%), %d failures (%d while a key had room, %d more within the guard)",
		g.served, g.capacity, 100*float64(g.served)/float64(g.capacity),
		g.vendor, g.sent, 100*float64(g.vendor)/float64(max(g.sent, 1)), g.failed, g.failedWithRoom, g.inGuard)
}

// naiveRoundRobin puts keys on requests in turn: no windows, no benches.
type naiveRoundRobin struct {
	keys []string
	next atomic.Uint64
	base http.RoundTripper
}

func (n *naiveRoundRobin) RoundTrip(r *http.Request) (*http.Response, error) {
	out := r.Clone(r.Context())
	out.Header.Set("Authorization", "Bearer "+n.keys[(n.next.Add(1)-1)%uint64(len(n.keys))])
	return n.base.RoundTrip(out)
}

// runGoodput offers twice the capacity of five keys of RPM 60 at a vendor
// that enforces that limit, for ten minutes of a simulated clock, through
// the pool (told the limits) or through naive round-robin.
func runGoodput(tb testing.TB, naive bool) goodput {
	const (
		keys  = 5
		rpm   = 60
		run   = 10 * time.Minute
		every = 100 * time.Millisecond // 10 a second: twice the 5 a second the keys allow
	)
	clock := newTestClock()
	cfg := vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now, OutputTokens: 5}
	var poolKeys []Key
	var secrets []string
	for i := range keys {
		secret := fmt.Sprintf("sk-goodput-%d", i)
		cfg.Keys = append(cfg.Keys, vendorsim.Key{Secret: secret, ID: secret, Limits: vendorsim.Limits{RPM: rpm}})
		poolKeys = append(poolKeys, Key{Secret: secret, ID: secret})
		secrets = append(secrets, secret)
	}
	sim := vendorsim.Start(cfg)
	defer sim.Close()
	var rt http.RoundTripper = &naiveRoundRobin{keys: secrets, base: http.DefaultTransport}
	if !naive {
		pool, err := New("goodput", poolKeys, WithClock(clock.Now), WithLimits(Limits{RPM: rpm}))
		if err != nil {
			tb.Fatal(err)
		}
		rt = pool.Transport(nil)
	}
	client := &http.Client{Transport: rt}
	var g goodput
	g.capacity = keys * rpm * int64(run/time.Minute)
	for elapsed := time.Duration(0); elapsed < run; elapsed += every {
		resp, err := client.Post(sim.URL()+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		var na *NoAvailableKeyError
		switch {
		case errors.As(err, &na):
			g.failed++
			switch now := clock.Now(); {
			case roomAtVendor(sim, secrets, rpm, now, ExactGuard):
				g.failedWithRoom++
			case roomAtVendor(sim, secrets, rpm, now, 0):
				g.inGuard++
			}
		case err != nil:
			tb.Fatal(err)
		default:
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				g.served++
			} else {
				g.failed++
			}
		}
		clock.Advance(every)
	}
	totals := sim.Totals()
	g.sent, g.vendor = totals.Requests, totals.RateLimited
	return g
}

// roomAtVendor reports whether some key had room at the vendor at now, and
// had had it for guard: fewer than rpm of its requests accepted in the
// minute and guard before now.
func roomAtVendor(sim *vendorsim.Server, ids []string, rpm int, now time.Time, guard time.Duration) bool {
	for _, id := range ids {
		n := 0
		for _, at := range sim.Accepted(id) {
			if now.Sub(at) < time.Minute+guard {
				n++
			}
		}
		if n < rpm {
			return true
		}
	}
	return false
}

func TestGoodput(t *testing.T) {
	g := runGoodput(t, false)
	t.Logf("pool: %s", g)
	share := float64(g.served) / float64(g.capacity)
	if share < 0.98 {
		t.Errorf("the pool served %.1f%% of the keys' capacity, want at least 98%%", 100*share)
	}
	if g.vendor != 0 {
		t.Errorf("the vendor answered 429 to %d requests; with the limits configured, want 0", g.vendor)
	}
	if g.failedWithRoom != 0 {
		t.Errorf("%d calls failed while a key had room at the vendor, want none", g.failedWithRoom)
	}
	if minutes := int64(10); g.inGuard > minutes {
		t.Errorf("%d calls failed within the guard, want at most one a minute of the run (%d)", g.inGuard, minutes)
	}
	naive := runGoodput(t, true)
	t.Logf("naive round-robin: %s", naive)
}

// BenchmarkGoodput runs the goodput workload and reports its shares.
func BenchmarkGoodput(b *testing.B) {
	for _, naive := range []bool{false, true} {
		name := "pool"
		if naive {
			name = "naive"
		}
		b.Run(name, func(b *testing.B) {
			var g goodput
			for b.Loop() {
				g = runGoodput(b, naive)
			}
			b.ReportMetric(100*float64(g.served)/float64(g.capacity), "%served")
			b.ReportMetric(100*float64(g.vendor)/float64(max(g.sent, 1)), "%429")
			b.ReportMetric(float64(g.failedWithRoom), "failed-with-room")
			b.ReportMetric(float64(g.inGuard), "failed-in-guard")
		})
	}
}

// BenchmarkLoopback compares a client through the pool with the same client
// putting one fixed key on its requests, against vendorsim on loopback
// answering at full speed; the ratio of their ns/op is the pool's cost in
// throughput.
func BenchmarkLoopback(b *testing.B) {
	cfg := vendorsim.Config{Dialect: vendorsim.OpenAI, OutputTokens: 5}
	var keys []Key
	for i := range 100 {
		secret := fmt.Sprintf("sk-loop-%03d", i)
		cfg.Keys = append(cfg.Keys, vendorsim.Key{Secret: secret, ID: secret})
		keys = append(keys, Key{Secret: secret, ID: secret})
	}
	sim := vendorsim.Start(cfg)
	defer sim.Close()
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 64
	pool, err := New("loopback", keys, WithLimits(Limits{RPM: 1 << 40, RPD: 1 << 40, TPM: 1 << 50, TPD: 1 << 50}))
	if err != nil {
		b.Fatal(err)
	}
	clients := map[string]*http.Client{
		"fixed": {Transport: floor{base: base, auth: []string{"Bearer " + keys[0].Secret}}},
		"pool":  {Transport: pool.Transport(base)},
	}
	url := sim.URL() + "/v1/chat/completions"
	for _, name := range []string{"fixed", "pool"} {
		b.Run(name, func(b *testing.B) {
			client := clients[name]
			b.ReportAllocs()
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := client.Post(url, "application/json", strings.NewReader(benchBody))
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
