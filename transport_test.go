package keypool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func threeKeys() []Key {
	return []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}, {Secret: "sk-c", ID: "c"}}
}

// get sends a GET through client and returns the status, or the error.
func get(t *testing.T, client *http.Client, url string) (int, error) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.ReadAll(resp.Body)
	return resp.StatusCode, nil
}

func TestTransportPutsKeyOnRequest(t *testing.T) {
	tests := []struct {
		name   string
		opt    Option
		target string
		header map[string]string
		raw    map[string]string // set under names as given, not canonical
		check  func(t *testing.T, r *http.Request)
	}{
		{
			name: "bearer by default", target: "/v1/chat",
			header: map[string]string{"Authorization": "Bearer caller-token"},
			check: func(t *testing.T, r *http.Request) {
				assert.Equal(t, []string{"Bearer sk-a"}, r.Header.Values("Authorization"))
			},
		},
		{
			name: "header", opt: HeaderAuth("x-goog-api-key"), target: "/v1beta/models",
			header: map[string]string{"X-Goog-Api-Key": "caller-key"},
			check: func(t *testing.T, r *http.Request) {
				assert.Equal(t, []string{"sk-a"}, r.Header.Values("X-Goog-Api-Key"))
				assert.Empty(t, r.Header.Get("Authorization"))
			},
		},
		{
			name: "bearer over a header of another spelling", target: "/v1/chat",
			raw: map[string]string{"authorization": "Bearer caller-token", "AUTHORIZATION": "Bearer other"},
			check: func(t *testing.T, r *http.Request) {
				assert.Equal(t, []string{"Bearer sk-a"}, spellings(r.Header, "Authorization"), "replaced, never doubled")
			},
		},
		{
			name: "header over a header of another spelling", opt: HeaderAuth("x-api-key"), target: "/v1/messages",
			raw: map[string]string{"x-api-key": "caller-key"},
			check: func(t *testing.T, r *http.Request) {
				assert.Equal(t, []string{"sk-a"}, spellings(r.Header, "X-Api-Key"), "replaced, never doubled")
			},
		},
		{
			name: "query", opt: QueryAuth("key"), target: "/v1beta/models?alt=sse&key=caller-key",
			check: func(t *testing.T, r *http.Request) {
				assert.Equal(t, []string{"sk-a"}, r.URL.Query()["key"])
				assert.Equal(t, "sse", r.URL.Query().Get("alt"))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var seen []*http.Request
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				// A base that adds to a header, or writes over its
				// values, must not write into the caller's values, nor
				// into the key's that later requests are sent with.
				r.Header.Add("Accept", "from-base")
				c := *r
				c.Header = r.Header.Clone()
				seen = append(seen, &c)
				for _, vs := range r.Header {
					for i := range vs {
						vs[i] = "written over"
					}
				}
				return okResponse(r), nil
			})
			pool, err := New("test", []Key{{Secret: "sk-a"}}, tt.opt)
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodGet, "http://vendor.test"+tt.target, nil)
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			for k, v := range tt.raw {
				req.Header[k] = []string{v}
			}
			accept := make([]string, 1, 4) // room an append would write into
			accept[0] = "application/json"
			req.Header["Accept"] = accept
			before := req.Header.Clone()
			beforeURL := req.URL.String()
			for range 2 {
				resp, err := pool.Transport(base).RoundTrip(req)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Same(t, req, resp.Request, "resp.Request is not the caller's request")
			}
			require.Len(t, seen, 2)
			for _, r := range seen {
				tt.check(t, r)
				assert.Equal(t, []string{"application/json", "from-base"}, r.Header["Accept"])
			}
			assert.Equal(t, before, req.Header, "the caller's headers changed")
			assert.Empty(t, accept[:2][1], "the caller's header values were written into")
			assert.Equal(t, beforeURL, req.URL.String(), "the caller's URL changed")
		})
	}
}

// spellings returns the values of every header whose name is name in any
// case: what goes on the wire under that name.
func spellings(h http.Header, name string) []string {
	var out []string
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			out = append(out, vs...)
		}
	}
	return out
}

func TestTransportRoundRobinFreeThenPaid(t *testing.T) {
	v, srv := newVendor(t)
	keys := []Key{{Secret: "paid", ID: "p", Paid: true}, {Secret: "f1", ID: "f1"}, {Secret: "f2", ID: "f2"}}
	pool, err := New("test", keys)
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	for range 4 {
		status, err := get(t, client, srv.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
	}
	assert.Equal(t, []string{"f1", "f2", "f1", "f2"}, v.keys(), "free keys round-robin, paid unused")

	// Both free keys revoked: the paid key takes over, once each has failed.
	v.on("f1", answer{status: http.StatusUnauthorized})
	v.on("f2", answer{status: http.StatusUnauthorized})
	for range 3 {
		status, err := get(t, client, srv.URL)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
	}
	assert.Equal(t, []string{"f1", "f2", "paid", "paid", "paid"}, v.keys()[4:])
}

func TestTransportFailsOverAndBenches(t *testing.T) {
	f := newFixture(t)
	clock, v, srv, ev, client := f.clock, f.vendor, f.url, f.ev, f.client
	v.on("sk-a", rateLimited("20"))

	status, err := get(t, client, srv)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status, "the caller sees the second key's answer")
	assert.Equal(t, []string{"sk-a", "sk-b"}, v.keys())
	require.Len(t, ev.all(), 1)
	assert.Equal(t, Eviction{Provider: "test", KeyID: "a", Kind: KindRate, For: 20 * time.Second,
		Until: clock.Now().Add(20 * time.Second)}, ev.all()[0])

	// a stays benched for 20 s: the next requests go to c, then b.
	for range 2 {
		_, err := get(t, client, srv)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"sk-c", "sk-b"}, v.keys()[2:])
	clock.Advance(20 * time.Second)
	for range 3 {
		_, err := get(t, client, srv)
		require.NoError(t, err)
	}
	assert.Contains(t, v.keys()[4:], "sk-a", "a is back after its bench")
}

func TestTransportReplaysBodyIntact(t *testing.T) {
	tests := []struct {
		name   string
		body   func(s string) io.Reader
		get    bool // the request has GetBody
		rewind bool // GetBody rewinds the request's own reader
	}{
		{name: "GetBody", body: func(s string) io.Reader { return strings.NewReader(s) }, get: true},
		{name: "GetBody that rewinds", body: func(s string) io.Reader { return strings.NewReader(s) }, get: true, rewind: true},
		{name: "body read whole", body: func(s string) io.Reader { return io.MultiReader(strings.NewReader(s)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, srv := newVendor(t)
			pool, err := New("test", threeKeys())
			require.NoError(t, err)
			v.on("sk-a", rateLimited("1"))
			v.on("sk-b", answer{status: http.StatusServiceUnavailable})
			const payload = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`
			req, _ := http.NewRequest(http.MethodPost, srv.URL, tt.body(payload))
			if tt.rewind {
				// GetBody rewinds the reader the request holds, as
				// go-retryablehttp's does.
				r := strings.NewReader(payload)
				req.Body = io.NopCloser(r)
				req.GetBody = func() (io.ReadCloser, error) { _, err := r.Seek(0, io.SeekStart); return io.NopCloser(r), err }
			}
			assert.Equal(t, tt.get, req.GetBody != nil)
			resp, err := pool.Transport(nil).RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			got := v.received()
			require.Len(t, got, 3)
			for _, r := range got {
				assert.Equal(t, payload, r.body, "key %s got another body", r.key)
			}
		})
	}
}

func TestTransportNoFailoverWithoutReplayableBody(t *testing.T) {
	v, srv := newVendor(t)
	var ev evictions
	pool, err := New("test", threeKeys(), OnEvict(ev.add))
	require.NoError(t, err)
	v.on("sk-a", rateLimited("5"))
	// A body longer than the transport reads whole, without GetBody.
	body := &closeCounter{Reader: io.MultiReader(strings.NewReader(`{"model":"m","x":"`),
		strings.NewReader(strings.Repeat("y", maxBodyScan)), strings.NewReader(`"}`))}
	req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
	resp, err := pool.Transport(nil).RoundTrip(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the vendor's answer comes back as it is")
	b, _ := io.ReadAll(resp.Body)
	assert.JSONEq(t, `{"error":{"type":"rate_limit_exceeded"}}`, string(b))
	assert.Equal(t, []string{"sk-a"}, v.keys())
	assert.Len(t, v.received()[0].body, maxBodyScan+len(`{"model":"m","x":""}`), "the body reached the vendor whole")
	assert.Len(t, ev.all(), 1, "the key is still benched")
}

func TestTransportAllKeysBenched(t *testing.T) {
	clock := newTestClock()
	v, srv := newVendor(t)
	pool, err := New("openai", threeKeys(), WithClock(clock.Now))
	require.NoError(t, err)
	v.on("sk-a", rateLimited("30"))
	v.on("sk-b", rateLimited("10"))
	v.on("sk-c", answer{status: http.StatusUnauthorized})
	client := &http.Client{Transport: pool.Transport(nil)}

	_, err = get(t, client, srv.URL)
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na, "through the *url.Error of http.Client")
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, "openai", na.Provider)
	assert.Equal(t, clock.Now().Add(10*time.Second), na.RetryAt, "the soonest key back is b")
	var pe *ProviderError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, KindRate, pe.Kind)
	assert.Equal(t, 10*time.Second, pe.RetryAfter)
	assert.Equal(t, []string{"sk-a", "sk-b", "sk-c"}, v.keys(), "each key tried once")

	// Nothing reaches the vendor until a key is back; then b serves.
	_, err = get(t, client, srv.URL)
	require.ErrorAs(t, err, &na)
	assert.Len(t, v.keys(), 3)
	clock.Advance(10 * time.Second)
	status, err := get(t, client, srv.URL)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "sk-b", v.keys()[3])
}

func TestTransportSingleKeyIsNotAPool(t *testing.T) {
	v, srv := newVendor(t)
	var ev evictions
	pool, err := New("test", []Key{{Secret: "only"}}, OnEvict(ev.add))
	require.NoError(t, err)
	v.on("only", rateLimited("60"), answer{status: http.StatusServiceUnavailable})
	client := &http.Client{Transport: pool.Transport(nil)}
	for _, want := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusOK} {
		status, err := get(t, client, srv.URL)
		require.NoError(t, err)
		assert.Equal(t, want, status)
	}
	assert.Empty(t, ev.all(), "a single key is never benched")
	assert.Len(t, v.keys(), 3)
}

func TestTransportNetworkErrorBenchesNothing(t *testing.T) {
	var ev evictions
	pool, err := New("test", threeKeys(), OnEvict(ev.add), WithLimits(Limits{RPM: 1}))
	require.NoError(t, err)
	boom := errors.New("connection refused")
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, boom })
	req, _ := http.NewRequest(http.MethodGet, "http://vendor.test/", nil)
	_, err = pool.Transport(base).RoundTrip(req)
	assert.ErrorIs(t, err, boom)
	assert.Empty(t, ev.all())
	for _, ks := range pool.Stats() {
		assert.Zero(t, ks.Bench)
		for _, m := range ks.Models {
			assert.Zero(t, m.Usage.MinuteRequests, "key %s kept the reservation of a request that never reached the vendor", ks.ID)
		}
	}
}

func TestTransportClosesRequestBodyOnce(t *testing.T) {
	tests := []struct {
		name  string
		base  http.RoundTripper
		keys  []Key
		setup func(p *Pool)
	}{
		{name: "success", base: closingBase(http.StatusOK), keys: threeKeys()},
		{name: "failover", base: closingBase(http.StatusTooManyRequests), keys: threeKeys()},
		{name: "no key available", base: closingBase(http.StatusOK), keys: threeKeys(), setup: func(p *Pool) {
			for _, k := range p.keys {
				_ = p.store.Bench(context.Background(), Bench{Provider: p.provider, KeyID: k.ID, AllModels: true,
					Kind: KindAuth, Until: time.Now().Add(time.Hour)})
			}
		}},
		{name: "network error", base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r.Body.Close()
			return nil, errors.New("reset")
		}), keys: threeKeys()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool, err := New("test", tt.keys)
			require.NoError(t, err)
			if tt.setup != nil {
				tt.setup(pool)
			}
			body := &closeCounter{Reader: strings.NewReader(`{"model":"m"}`)}
			req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/", body)
			resp, _ := pool.Transport(tt.base).RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
			}
			assert.Equal(t, 1, body.count(), "Close calls on the request body")
		})
	}
}

func TestTransportDrainsDiscardedAnswer(t *testing.T) {
	pool, err := New("test", threeKeys())
	require.NoError(t, err)
	var bodies []*closeCounter
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		status := http.StatusOK
		if len(bodies) == 0 {
			status = http.StatusServiceUnavailable
		}
		b := &closeCounter{Reader: strings.NewReader(strings.Repeat("x", 100<<10))}
		bodies = append(bodies, b)
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: b, Request: r}, nil
	})
	req, _ := http.NewRequest(http.MethodGet, "http://vendor.test/", nil)
	resp, err := pool.Transport(base).RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	require.Len(t, bodies, 2)
	assert.Equal(t, 1, bodies[0].count(), "the discarded answer is closed")
	assert.Equal(t, 0, bodies[1].count(), "the answer returned is the caller's to close")
}

func TestTransportFailureBodyReachesCaller(t *testing.T) {
	big := `{"error":{"type":"insufficient_quota","pad":"` + strings.Repeat("z", 2*maxFailureBody) + `"}}`
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "only"}})
	require.NoError(t, err)
	v.on("only", answer{status: http.StatusTooManyRequests, body: big})
	resp, err := (&http.Client{Transport: pool.Transport(nil)}).Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, big, string(b))
}

func TestTransportBenchByKind(t *testing.T) {
	tests := []struct {
		name     string
		answer   answer
		kind     Kind
		wantFor  time.Duration
		allModel bool
		// latest is a quota bench's end, looked at early after wantFor.
		latest time.Duration
	}{
		{"429 with Retry-After", rateLimited("20"), KindRate, 20 * time.Second, false, 0},
		{"429 without date", answer{status: 429}, KindRate, time.Minute, false, 0},
		{"Retry-After below the floor", rateLimited("0"), KindRate, time.Second, false, 0},
		{"Retry-After beyond the ceiling", rateLimited("50000"), KindRate, 12 * time.Hour, false, 0},
		{"401", answer{status: 401}, KindAuth, 12 * time.Hour, true, 0},
		{"402", answer{status: 402}, KindQuota, 5 * time.Minute, true, 12 * time.Hour},
		{"insufficient_quota", answer{status: 429, body: `{"error":{"code":"insufficient_quota"}}`}, KindQuota, 5 * time.Minute, true, 12 * time.Hour},
		// Prose the request holds no word of: the vendor's own.
		{"credit balance", answer{status: 400, body: `{"error":{"message":"Your credit balance is too low to access the Anthropic API."}}`}, KindQuota, 5 * time.Minute, true, 12 * time.Hour},
		{"400 with a billing code", answer{status: 400, body: `{"error":{"message":"x","code":"insufficient_quota"}}`}, KindQuota, 5 * time.Minute, true, 12 * time.Hour},
		{"503", answer{status: 503}, KindTransient, time.Minute, false, 0},
		{"529", answer{status: 529}, KindTransient, time.Minute, false, 0},
		{"403 remaining 0", answer{status: 403, header: map[string]string{"X-Ratelimit-Remaining": "0"}}, KindRate, time.Minute, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			clock, ev, pool := f.clock, f.ev, f.pool
			f.vendor.on("sk-a", tt.answer)
			req, _ := http.NewRequest(http.MethodPost, f.url, strings.NewReader(`{"model":"gpt-x"}`))
			resp, err := pool.Transport(nil).RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Len(t, ev.all(), 1)
			e := ev.all()[0]
			assert.Equal(t, tt.kind, e.Kind)
			assert.Equal(t, tt.wantFor, e.For)
			if tt.latest != 0 {
				assert.Equal(t, clock.Now().Add(tt.latest), e.Latest, "the bench's end")
			} else {
				assert.Zero(t, e.Latest)
			}
			wantModel := "gpt-x"
			if tt.allModel {
				wantModel = ""
			}
			assert.Equal(t, wantModel, e.Model)
			st := pool.Stats()[0]
			if tt.allModel {
				assert.Equal(t, Bench{Kind: tt.kind, Until: clock.Now().Add(tt.wantFor)}, st.Bench)
			} else {
				assert.Zero(t, st.Bench)
				require.Len(t, st.Models, 1)
				assert.Equal(t, Bench{Kind: tt.kind, Until: clock.Now().Add(tt.wantFor)}, st.Models[0].Bench)
			}
		})
	}
}

func TestTransportBenchIsPerModel(t *testing.T) {
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b", Paid: true}})
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	v.on("sk-a", rateLimited("30"))
	post := func(model string) {
		resp, err := client.Post(srv.URL, "application/json", strings.NewReader(`{"model":"`+model+`"}`))
		require.NoError(t, err)
		resp.Body.Close()
	}
	post("m1") // a throttled for m1: b serves
	post("m2") // a serves m2
	post("m1") // b serves m1
	assert.Equal(t, []string{"sk-a", "sk-b", "sk-a", "sk-b"}, v.keys())
}

// roundTripFunc is an http.RoundTripper from a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func okResponse(r *http.Request) *http.Response {
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(nil)), Request: r}
}

// closingBase answers status after reading and closing the request body, as
// http.Transport does.
func closingBase(status int) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			_, _ = io.ReadAll(r.Body)
			r.Body.Close()
		}
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
	})
}

func TestTransportSetsKeyAsideWhenWindowIsSpent(t *testing.T) {
	tests := []struct {
		name  string
		reset string
		kind  Kind          // the bench's; KindNone where the key's windows hold it instead
		for_  time.Duration // the bench's length
	}{
		{"a spent minute: the learned window holds it", "20s", KindNone, 0},
		{"a spent day", "5h0m0s", KindQuota, 5 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			v, ev := f.vendor, f.ev
			v.on("sk-a", answer{status: 200, header: map[string]string{
				"X-Ratelimit-Limit-Requests": "10", "X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": tt.reset}})
			for range 4 {
				status, err := get(t, f.client, f.url)
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, status, "the answer that spends the window still reaches the caller")
			}
			assert.Equal(t, []string{"sk-a", "sk-b", "sk-c", "sk-b"}, v.keys(), "a is set aside before any 429")
			if tt.kind == KindNone {
				assert.Empty(t, ev.all())
				f.clock.Advance(21 * time.Second)
				for range 3 {
					_, err := get(t, f.client, f.url)
					require.NoError(t, err)
				}
				assert.Contains(t, v.keys()[4:], "sk-a", "back when the vendor's minute resets")
				return
			}
			require.Len(t, ev.all(), 1)
			assert.Equal(t, tt.kind, ev.all()[0].Kind)
			assert.Equal(t, tt.for_, ev.all()[0].For)
		})
	}
}

func TestTransportOnRateLimit(t *testing.T) {
	reset := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header map[string]string
		want   []Reading
	}{
		{
			name: "a subscription window on a success",
			header: map[string]string{
				"Anthropic-Ratelimit-Unified-Status":         "allowed",
				"Anthropic-Ratelimit-Unified-5h-Utilization": "0.91",
				"Anthropic-Ratelimit-Unified-5h-Reset":       strconv.FormatInt(reset.Unix(), 10),
			},
			want: []Reading{{Provider: "test", KeyID: "a", Window: Window5h, Utilization: 0.91, ResetAt: reset}},
		},
		{
			name: "an API-key account's minute windows",
			header: map[string]string{
				"X-Ratelimit-Limit-Requests": "60", "X-Ratelimit-Remaining-Requests": "5", "X-Ratelimit-Reset-Requests": "1s",
			},
		},
		{name: "no headers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newTestClock()
			v, srv := newVendor(t)
			var got []Reading
			pool, err := New("test", threeKeys(), WithClock(clock.Now), OnRateLimit(func(r Reading) { got = append(got, r) }))
			require.NoError(t, err)
			v.on("sk-a", answer{status: 200, header: tt.header})
			_, err = get(t, &http.Client{Transport: pool.Transport(nil)}, srv.URL)
			require.NoError(t, err)
			require.Len(t, got, len(tt.want))
			for i := range tt.want {
				assert.Equal(t, tt.want[i].Window, got[i].Window)
				assert.InDelta(t, tt.want[i].Utilization, got[i].Utilization, 1e-9)
				assert.True(t, tt.want[i].ResetAt.Equal(got[i].ResetAt), "ResetAt = %v, want %v", got[i].ResetAt, tt.want[i].ResetAt)
				assert.Equal(t, "a", got[i].KeyID)
			}
		})
	}
}

func TestTransportKeepsSlotWhenCallerGivesUp(t *testing.T) {
	pool, err := New("test", []Key{{Secret: "sk-a"}}, WithLimits(Limits{RPM: 5}))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		cancel() // the caller gives up while the vendor has the request
		return nil, r.Context().Err()
	})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://vendor.test/", nil)
	_, err = pool.Transport(base).RoundTrip(req)
	require.ErrorIs(t, err, context.Canceled)
	st := pool.Stats()[0]
	require.Len(t, st.Models, 1)
	assert.Equal(t, int64(1), st.Models[0].Usage.MinuteRequests, "the vendor may have counted it")
}

// A key net/http refuses to put on a request is the key's fault: it is
// benched as a revoked key is, and the request goes to the next key.
func TestTransportKeyTheTransportRefusesIsBenched(t *testing.T) {
	var ev evictions
	var sent []string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Header.Get("Authorization") == "Bearer sk-a" {
			return nil, fmt.Errorf("net/http: invalid header field value for %q", "Authorization")
		}
		sent = append(sent, r.Header.Get("Authorization"))
		return okResponse(r), nil
	})
	pool, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, OnEvict(ev.add))
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodGet, "http://vendor.test/v1/models", nil)
	resp, err := pool.Transport(base).RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, []string{"Bearer sk-b"}, sent)
	require.Len(t, ev.all(), 1)
	assert.Equal(t, "a", ev.all()[0].KeyID)
	assert.Equal(t, KindAuth, ev.all()[0].Kind)
}
