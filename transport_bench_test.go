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
// carries OpenAI's rate-limit headers.
type cannedBase struct{ header http.Header }

func newCannedBase() *cannedBase {
	return &cannedBase{header: http.Header{
		"Content-Type":                   {"application/json"},
		"X-Ratelimit-Limit-Requests":     {"10000"},
		"X-Ratelimit-Remaining-Requests": {"9999"},
		"X-Ratelimit-Reset-Requests":     {"6ms"},
		"X-Ratelimit-Limit-Tokens":       {"2000000"},
		"X-Ratelimit-Remaining-Tokens":   {"1999000"},
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
	rts := map[string]func(b *testing.B) http.RoundTripper{
		"floor": func(*testing.B) http.RoundTripper { return floor{base: base, auth: []string{"Bearer sk-1"}} },
		"oauth2": func(*testing.B) http.RoundTripper {
			return &oauth2.Transport{Source: oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "sk-1"}), Base: base}
		},
		"pool": func(b *testing.B) http.RoundTripper {
			return benchPool(b, 100).Transport(base)
		},
		// Request limits only: no token estimate, no usage read.
		"pool-requests": func(b *testing.B) http.RoundTripper {
			return benchPool(b, 100, WithLimits(Limits{RPM: 1 << 40, RPD: 1 << 40})).Transport(base)
		},
	}
	for _, name := range []string{"floor", "oauth2", "pool", "pool-requests"} {
		for _, parallel := range []bool{false, true} {
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

// BenchmarkScaling measures a request through the transport as the keys and
// the models grow: the pick of a key and the check of its windows should
// cost the same for 10,000 keys as for one.
func BenchmarkScaling(b *testing.B) {
	base := newCannedBase()
	for _, c := range []struct{ keys, models int }{{1, 1}, {10_000, 1}, {1, 100}} {
		b.Run(fmt.Sprintf("keys=%d/models=%d", c.keys, c.models), func(b *testing.B) {
			rt := benchPool(b, c.keys).Transport(base)
			bodies := make([]string, c.models)
			for i := range bodies {
				bodies[i] = strings.Replace(benchBody, "gpt-4o-mini", fmt.Sprintf("model-%d", i), 1)
			}
			// Warm every key and model, so that the first touch of each is
			// not what is measured.
			for i := range max(c.keys, c.models) * 2 {
				roundTripBody(b, rt, bodies[i%c.models])
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				roundTripBody(b, rt, bodies[i%c.models])
				i++
			}
		})
	}
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
		s := NewMemoryStore()
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
