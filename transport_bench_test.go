package keypool

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/oauth2"
)

// cannedBase answers every request at once with a fixed answer that
// carries OpenAI's rate-limit headers. The limits it states are far above
// what any benchmark sends in a minute of its clock: the pool follows what
// a vendor states, and would refuse a key the vendor said was full.
type cannedBase struct{ header http.Header }

func newCannedBase() *cannedBase {
	return &cannedBase{header: http.Header{
		"Content-Type":                   {"application/json"},
		"X-Ratelimit-Limit-Requests":     {"1000000000"},
		"X-Ratelimit-Remaining-Requests": {"999999999"},
		"X-Ratelimit-Reset-Requests":     {"6ms"},
		"X-Ratelimit-Limit-Tokens":       {"1000000000000"},
		"X-Ratelimit-Remaining-Tokens":   {"999999999000"},
		"X-Ratelimit-Reset-Tokens":       {"30ms"},
	}}
}

const cannedBody = `{"id":"x","usage":{"prompt_tokens":20,"completion_tokens":30,"total_tokens":50}}`

func (c *cannedBase) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: c.header, Body: io.NopCloser(strings.NewReader(cannedBody)), Request: r}, nil
}

// floor is the least a key-injecting transport does: clone the request and
// set the auth header.
type floor struct {
	base http.RoundTripper
	auth []string
}

func (f floor) RoundTrip(r *http.Request) (*http.Response, error) {
	out := r.Clone(r.Context())
	out.Header["Authorization"] = f.auth
	return f.base.RoundTrip(out)
}

const benchBody = `{"model":"gpt-4o-mini","max_tokens":100,"messages":[{"role":"user","content":"Say hello in one short sentence, please."}]}`

func benchRequest() *http.Request {
	req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat/completions", strings.NewReader(benchBody))
	req.Header.Set("Content-Type", "application/json")
	return req
}

func roundTrip(b *testing.B, rt http.RoundTripper) {
	resp, err := rt.RoundTrip(benchRequest())
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// BenchmarkOverhead compares the pool's transport (100 keys, all four
// limits, rate-limit headers on every answer) with the floor, serially and
// with 16 goroutines.
func BenchmarkOverhead(b *testing.B) {
	base := newCannedBase()
	requestsOnly := newCannedBase()
	for name := range requestsOnly.header {
		if strings.HasSuffix(name, "-Tokens") {
			delete(requestsOnly.header, name)
		}
	}
	rts := map[string]func(b *testing.B) http.RoundTripper{
		"floor": func(*testing.B) http.RoundTripper { return floor{base: base, auth: []string{"Bearer sk-1"}} },
		"oauth2": func(*testing.B) http.RoundTripper {
			return &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "sk-1"}), Base: base}
		},
		"pool": func(b *testing.B) http.RoundTripper {
			return benchPool(b, 100).Transport(base)
		},
		// Request limits only, configured and stated: no token estimate,
		// no usage read.
		"pool-requests": func(b *testing.B) http.RoundTripper {
			return benchPool(b, 100, WithLimits(Limits{RPM: 1 << 40, RPD: 1 << 40})).Transport(requestsOnly)
		},
	}
	// Each mode's transports run one after the other, so that each is
	// measured seconds from its floor on a machine whose speed wanders;
	// x/oauth2 right after the floor, for what runs after a pool's run in
	// the same process comes out slower (x/oauth2 1.1–1.4× the floor there,
	// against 1.1× right after it).
	for _, parallel := range []bool{false, true} {
		for _, name := range []string{"floor", "oauth2", "pool", "pool-requests"} {
			b.Run(fmt.Sprintf("%s/parallel=%t", name, parallel), func(b *testing.B) {
				rt := rts[name](b)
				b.ReportAllocs()
				if !parallel {
					for b.Loop() {
						roundTrip(b, rt)
					}
					return
				}
				b.SetParallelism(8) // 16 goroutines on 2 cores
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						roundTrip(b, rt)
					}
				})
			})
		}
	}
}

// BenchmarkScaling measures a request through the transport as what the
// pool holds grows, one dimension at a time from one key, one model, no
// account and one goroutine: keys (1 … 100,000), models a key serves (1 …
// 1,000), accounts the keys share (1 … 1,000, 1,000 keys, each account with
// limits of its own), and goroutines sending at once (1 … 256, 100 keys).
// Every key, model and account is warmed first, so that its first touch is
// not what is measured.
func BenchmarkScaling(b *testing.B) {
	type shape struct{ keys, models, accounts, goroutines int }
	var shapes []shape
	for _, n := range []int{1, 10, 100, 1_000, 10_000, 100_000} {
		shapes = append(shapes, shape{keys: n, models: 1, goroutines: 1})
	}
	for _, n := range []int{10, 100, 1_000} {
		shapes = append(shapes, shape{keys: 1, models: n, goroutines: 1})
	}
	for _, n := range []int{1, 10, 100, 1_000} {
		shapes = append(shapes, shape{keys: 1_000, models: 1, accounts: n, goroutines: 1})
	}
	for _, n := range []int{4, 16, 64, 256} {
		shapes = append(shapes, shape{keys: 100, models: 1, goroutines: n})
	}
	base := newCannedBase()
	for _, c := range shapes {
		b.Run(fmt.Sprintf("keys=%d/models=%d/accounts=%d/goroutines=%d", c.keys, c.models, c.accounts, c.goroutines), func(b *testing.B) {
			rt := scalingPool(b, c.keys, c.accounts).Transport(base)
			bodies := make([]string, c.models)
			for i := range bodies {
				bodies[i] = strings.Replace(benchBody, "gpt-4o-mini", fmt.Sprintf("model-%d", i), 1)
			}
			for i := range max(c.keys, c.models) * 2 {
				roundTripBody(b, rt, bodies[i%c.models])
			}
			b.ReportAllocs()
			if c.goroutines == 1 {
				i := 0
				for b.Loop() {
					roundTripBody(b, rt, bodies[i%c.models])
					i++
				}
				return
			}
			b.SetParallelism(max(c.goroutines/runtime.GOMAXPROCS(0), 1))
			b.RunParallel(func(pb *testing.PB) {
				for i := 0; pb.Next(); i++ {
					roundTripBody(b, rt, bodies[i%c.models])
				}
			})
		})
	}
}

// scalingPool is benchPool's pool of n keys, its keys shared round-robin by
// accounts accounts (none for 0), each account with limits of its own.
func scalingPool(b *testing.B, n, accounts int) *Pool {
	if accounts == 0 {
		return benchPool(b, n)
	}
	keys := make([]Key, n)
	var opts []Option
	for a := range accounts {
		opts = append(opts, WithAccountLimits(fmt.Sprintf("acct-%04d", a), Limits{RPM: 1 << 40, TPM: 1 << 50}))
	}
	for i := range keys {
		keys[i] = Key{Secret: fmt.Sprintf("sk-%06d", i), ID: fmt.Sprintf("k%06d", i), Account: fmt.Sprintf("acct-%04d", i%accounts)}
	}
	return benchPoolOf(b, keys, opts...)
}

func roundTripBody(b *testing.B, rt http.RoundTripper, body string) {
	req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat/completions", strings.NewReader(body))
	resp, err := rt.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
}

// BenchmarkWindowSetMemory reports the heap one key × model window set
// takes in the memory store, map entries included.
func BenchmarkWindowSetMemory(b *testing.B) {
	const sets = 10_000
	for b.Loop() {
		s := newMemoryStore()
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		t := Claim{Provider: "p", Model: "m", Limits: Limits{RPM: 100, RPD: 1000, TPM: 1e6, TPD: 1e7}, Tokens: 10, Now: time.Now()}
		for i := range sets {
			t.KeyID = fmt.Sprintf("key-%05d", i)
			_, _ = s.Take(context.Background(), t)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/sets, "B/set")
		runtime.KeepAlive(s)
	}
}

// BenchmarkCloneHeader copies a request's header for its outgoing clone,
// the key's header set: the bench's one header, and the ten an SDK sends.
func BenchmarkCloneHeader(b *testing.B) {
	sdk := http.Header{
		"Content-Type": {"application/json"}, "Accept": {"application/json"}, "User-Agent": {"OpenAI/Go 3.0.0"},
		"X-Stainless-Lang": {"go"}, "X-Stainless-Package-Version": {"3.0.0"}, "X-Stainless-Os": {"Linux"},
		"X-Stainless-Arch": {"x64"}, "X-Stainless-Runtime": {"go"}, "X-Stainless-Retry-Count": {"0"},
		"Authorization": {"Bearer placeholder"},
	}
	auth := []string{"Bearer sk-1"}
	for _, tc := range []struct {
		name string
		h    http.Header
	}{{"one", http.Header{"Content-Type": {"application/json"}}}, {"sdk", sdk}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				cloneHeader(tc.h, "Authorization", auth)
			}
		})
	}
}
