package keypool

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
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
		"pool": func(b *testing.B) http.RoundTripper {
			return benchPool(b, 100).Transport(base)
		},
	}
	for _, name := range []string{"floor", "pool"} {
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
