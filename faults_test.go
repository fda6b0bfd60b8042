package keypool

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fault tests: a vendor that drops the connection, absurd header values,
// a request body that fails, a context cancelled while waiting, a base
// transport that fails, and a store that fails its writes. Under each the
// pool answers every request once, benches no key for longer than it
// should, keeps its windows right and loses no state.

// chatBodyM is a chat request body of the model "m" whose token estimate is
// 103: the prompt "user" and "hello" over four, rounded up, and 100 of
// output.
const chatBodyM = `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`

// keyOf returns the secret a request carries as a bearer token.
func keyOf(r *http.Request) string {
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// cutShort answers status with header, announcing body whole, sends the
// first keep bytes of body, then drops the connection.
func cutShort(w http.ResponseWriter, status int, header map[string]string, body string, keep int) {
	for k, v := range header {
		w.Header().Set(k, v)
	}
	if header["Content-Type"] != "text/event-stream" {
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body[:keep])
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler) // net/http drops the connection without a log
}

// hangUp drops the connection before any answer.
func hangUp(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// usage returns what the pool counts for the key with the given ID for
// model "m".
func usage(t *testing.T, p *Pool, id string) ModelStats {
	t.Helper()
	for _, ks := range p.Stats() {
		if ks.ID != id {
			continue
		}
		for _, m := range ks.Models {
			if m.Model == "m" {
				return m
			}
		}
		return ModelStats{}
	}
	t.Fatalf("no key %s", id)
	return ModelStats{}
}

func TestFaultVendorDropsTheConnection(t *testing.T) {
	const okBody = `{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`
	const streamed = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}}\n\n"
	tests := []struct {
		name string
		// a is how the key a answers; b answers 200 with okBody.
		a func(w http.ResponseWriter)
		// status is what the caller gets, 0 for an error; readErr that
		// reading the body fails.
		status  int
		readErr bool
		// tokens are what the key a counts for the request afterwards;
		// requests, its requests; bench, the kind it is benched by.
		requests, tokens int64
		bench            Kind
	}{
		{
			name:   "a success cut before its usage keeps the estimate",
			a:      func(w http.ResponseWriter) { cutShort(w, 200, nil, okBody, 40) },
			status: 200, readErr: true, requests: 1, tokens: 103,
		},
		{
			name: "a stream cut after its usage settles the usage",
			a: func(w http.ResponseWriter) {
				cutShort(w, 200, map[string]string{"Content-Type": "text/event-stream"}, streamed+"data: {\"choi", len(streamed)+11)
			},
			status: 200, readErr: true, requests: 1, tokens: 7,
		},
		{
			name: "a throttle cut short benches the key and goes to the next",
			a: func(w http.ResponseWriter) {
				cutShort(w, 429, map[string]string{"Retry-After": "30"}, `{"error":{"type":"rate_limit_exceeded","message":"Rate limit reached"}}`, 20)
			},
			status: 200, requests: 1, bench: KindRate,
		},
		{
			name: "a server error cut short benches the key and goes to the next",
			a:    func(w http.ResponseWriter) { cutShort(w, 503, nil, strings.Repeat("x", 100<<10), 70<<10) },
			// a fault of the vendor's: the key is benched
			status: 200, requests: 1, bench: KindTransient,
		},
		{
			name:     "a connection dropped before any answer counts nothing",
			a:        func(w http.ResponseWriter) { hangUp(w) },
			requests: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if keyOf(r) == "sk-a" {
					tt.a(w)
					return
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, okBody)
			}))
			defer srv.Close()
			clock := newTestClock()
			var ev evictions
			pool, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}},
				WithClock(clock.Now), WithLimits(Limits{RPM: 10, TPM: 1 << 20}), OnEvict(ev.add))
			require.NoError(t, err)
			defer pool.Close()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: pool.Transport(tr)}

			resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBodyM))
			if tt.status == 0 {
				require.Error(t, err)
				assert.NotContains(t, err.Error(), "sk-a")
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.status, resp.StatusCode)
				_, err = io.ReadAll(resp.Body)
				require.NoError(t, resp.Body.Close())
				if tt.readErr {
					assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
				} else {
					assert.NoError(t, err)
				}
			}
			got := usage(t, pool, "a")
			assert.Equal(t, tt.requests, got.Usage.MinuteRequests, "requests key a counts")
			assert.Equal(t, tt.tokens, got.Usage.MinuteTokens, "tokens key a counts")
			assert.Equal(t, tt.bench, got.Bench.Kind, "bench of key a")
			if tt.bench != KindNone {
				require.Len(t, ev.all(), 1)
				assert.Equal(t, "a", ev.all()[0].KeyID)
			} else {
				assert.Empty(t, ev.all())
			}
		})
	}
}

func TestFaultAbsurdHeaderValues(t *testing.T) {
	far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	headers := []struct {
		name   string
		header map[string]string
	}{
		{"huge retry-after", map[string]string{"Retry-After": "1e308"}},
		{"retry-after past int64", map[string]string{"Retry-After": "99999999999999999999"}},
		{"negative retry-after", map[string]string{"Retry-After": "-5"}},
		{"NaN retry-after", map[string]string{"Retry-After": "NaN"}},
		{"infinite retry-after", map[string]string{"Retry-After": "+Inf"}},
		{"far-future retry-after date", map[string]string{"Retry-After": far.Format(http.TimeFormat)}},
		{"retry-after date in year one", map[string]string{"Retry-After": "Mon, 01 Jan 0001 00:00:00 GMT"}},
		{"negative retry-after-ms", map[string]string{"Retry-After-Ms": "-1"}},
		{"overflowing retry-after-ms", map[string]string{"Retry-After-Ms": "1e400"}},
		{"NaN reset of a spent minute", map[string]string{
			"X-Ratelimit-Limit-Requests": "10", "X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Reset-Requests": "NaN"}},
		{"negative reset and remaining", map[string]string{
			"X-Ratelimit-Limit-Requests": "-10", "X-Ratelimit-Remaining-Requests": "-1", "X-Ratelimit-Reset-Requests": "-1s"}},
		{"reset of a million hours", map[string]string{
			"X-Ratelimit-Limit-Tokens": "10", "X-Ratelimit-Remaining-Tokens": "0", "X-Ratelimit-Reset-Tokens": "999999h"}},
		{"far-future epoch reset", map[string]string{
			"X-Ratelimit-Limit": "60", "X-Ratelimit-Remaining": "0", "X-Ratelimit-Reset": "99999999999999"}},
		{"NaN and huge utilization of a weekly window", map[string]string{
			"Anthropic-Ratelimit-Unified-Status": "rejected", "Anthropic-Ratelimit-Unified-7d-Utilization": "NaN",
			"Anthropic-Ratelimit-Unified-5h-Utilization": "1e308", "Anthropic-Ratelimit-Unified-7d-Reset": "99999999999"}},
		{"negative utilization and reset", map[string]string{
			"Anthropic-Ratelimit-Unified-5h-Utilization": "-3", "Anthropic-Ratelimit-Unified-5h-Reset": "-1"}},
		{"codex percent NaN and a negative wait", map[string]string{
			"X-Codex-Primary-Used-Percent": "NaN", "X-Codex-Primary-Reset-After-Seconds": "-100", "X-Codex-Primary-Window-Minutes": "-300"}},
		{"IETF reset past int64", map[string]string{"Ratelimit": "limit=10, remaining=0, reset=99999999999999999999"}},
	}
	for _, status := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusOK} {
		for _, h := range headers {
			t.Run(strconv.Itoa(status)+" "+h.name, func(t *testing.T) {
				clock := newTestClock()
				now := clock.Now()
				var ev evictions
				var readings []Reading
				var mu sync.Mutex
				pool, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, WithClock(clock.Now),
					OnEvict(ev.add), OnRateLimit(func(r Reading) { mu.Lock(); readings = append(readings, r); mu.Unlock() }))
				require.NoError(t, err)
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					resp := &http.Response{StatusCode: status, Header: http.Header{}, Request: r,
						Body: io.NopCloser(strings.NewReader(`{"error":{"message":"limited"}}`))}
					for k, v := range h.header {
						resp.Header.Set(k, v)
					}
					return resp, nil
				})
				rt := pool.Transport(base)
				for range 3 { // both keys answer, then perhaps none is left
					req, _ := http.NewRequest(http.MethodGet, "http://vendor.test/v1beta/models/m:generateContent", nil)
					resp, err := rt.RoundTrip(req)
					var na *NoAvailableKeyError
					switch {
					case errors.As(err, &na):
						assert.False(t, na.RetryAt.Before(now.Add(time.Second)), "RetryAt %v, want no sooner than a second", na.RetryAt)
						assert.False(t, na.RetryAt.After(now.Add(12*time.Hour)), "RetryAt %v, want within 12h", na.RetryAt)
					case err != nil:
						t.Fatalf("RoundTrip: %v", err)
					default:
						assert.Equal(t, status, resp.StatusCode)
						require.NoError(t, resp.Body.Close())
					}
				}
				for _, e := range ev.all() {
					assert.True(t, e.For >= time.Second && e.For <= 12*time.Hour, "%s benched for %v, want 1s..12h", e.KeyID, e.For)
					assert.Equal(t, now.Add(e.For), e.Until)
				}
				for _, r := range readings {
					assert.False(t, math.IsNaN(r.Utilization) || math.IsInf(r.Utilization, 0) || r.Utilization < 0,
						"utilization %v", r.Utilization)
					if !r.ResetAt.IsZero() {
						assert.False(t, r.ResetAt.Before(now) || r.ResetAt.After(now.Add(maxHorizon)), "reset %v", r.ResetAt)
					}
				}
				switch status {
				case http.StatusTooManyRequests:
					assert.Len(t, ev.all(), 2, "each key benched once")
				case http.StatusServiceUnavailable:
					// A second bad moment of one request benches nothing:
					// the second key is benched by the next request, unless
					// its own headers said its minute was spent.
					assert.Contains(t, []int{1, 2}, len(ev.all()), "each key benched at most once")
				}
			})
		}
	}
}

// failingBody is a request body that fails after its first n bytes.
type failingBody struct {
	closeCounter
	n int
}

var errBodyRead = errors.New("body read failed")

func newFailingBody(prefix string, n int) *failingBody {
	return &failingBody{closeCounter: closeCounter{Reader: strings.NewReader(strings.Repeat(prefix, n/max(len(prefix), 1)+1))}, n: n}
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.n <= 0 {
		return 0, errBodyRead
	}
	p = p[:min(len(p), b.n)]
	n, err := b.closeCounter.Read(p)
	b.n -= n
	return n, err
}

func TestFaultRequestBodyFailsToRead(t *testing.T) {
	tests := []struct {
		name string
		path string
		// opts make the pool read the body itself (token limits), or not.
		opts []Option
		body *failingBody
	}{
		{"read by the pool for its model", "/v1/chat/completions", nil, newFailingBody(`{"model":"m",`, 13)},
		{"read by the pool for its estimate", "/v1beta/models/m:generateContent", []Option{WithLimits(Limits{TPM: 1 << 20})},
			newFailingBody(`{"contents":[`, 100)},
		{"read by the vendor", "/v1beta/models/m:generateContent", nil, newFailingBody(`{"contents":[`, 100)},
		{"read by the vendor after the first MiB", "/v1/chat/completions", []Option{WithLimits(Limits{TPM: 1 << 40})},
			newFailingBody(`{"model":"m","messages":[`+strings.Repeat(`{"role":"user","content":"hello"},`, 100), 2<<20)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var received atomic.Int64 // requests received whole
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, err := io.Copy(io.Discard, r.Body); err == nil {
					received.Add(1)
				}
			}))
			defer srv.Close()
			var ev evictions
			pool, err := New("test", threeKeys(), append(tt.opts, OnEvict(ev.add), WithLimits(Limits{RPM: 10, TPM: 1 << 40}))...)
			require.NoError(t, err)
			defer pool.Close()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+tt.path, tt.body)
			require.NoError(t, err)
			resp, err := (&http.Client{Transport: pool.Transport(tr)}).Do(req)
			if resp != nil {
				resp.Body.Close()
			}
			require.ErrorIs(t, err, errBodyRead)
			assert.Zero(t, received.Load(), "requests the vendor received whole")
			assert.Equal(t, 1, tt.body.count(), "Close calls on the request body")
			assert.Empty(t, ev.all(), "benches")
			for _, ks := range pool.Stats() {
				for _, m := range ks.Models {
					assert.Zero(t, m.Usage.MinuteRequests, "key %s counts a request that never reached the vendor", ks.ID)
				}
			}
		})
	}
	t.Run("through a fallback", func(t *testing.T) {
		pool, err := New("test", threeKeys())
		require.NoError(t, err)
		fb, err := NewFallback([]Route{{Pool: pool, URL: &url.URL{Scheme: "http", Host: "vendor.test"}, Base: closingBase(200)}})
		require.NoError(t, err)
		body := newFailingBody("x", 10)
		req, _ := http.NewRequest(http.MethodPost, "http://proxy.test/v1/chat/completions", body)
		_, err = fb.RoundTrip(req)
		require.ErrorIs(t, err, errBodyRead)
		assert.Equal(t, 1, body.count(), "Close calls on the request body")
	})
}

func TestFaultContextCancelledWhileWaitingForKey(t *testing.T) {
	t.Run("a waiter leaves its line and the rest are served in order", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b"}}, WaitForKey(time.Hour))
			require.NoError(t, err)
			for _, k := range pool.keys {
				require.NoError(t, pool.store.Bench(t.Context(), Bench{Provider: "test", KeyID: k.ID, Model: "m",
					Kind: KindRate, Until: time.Now().Add(10 * time.Minute)}))
			}
			start := time.Now()
			type result struct {
				i   int
				err error
				at  time.Duration
			}
			results := make(chan result, 3)
			cancels := make([]context.CancelFunc, 3)
			for i := range 3 {
				ctx, cancel := context.WithCancel(t.Context())
				cancels[i] = cancel
				go func() {
					err := pool.Do(ctx, "m", func(context.Context, Key) error { return nil })
					results <- result{i, err, time.Since(start)}
				}()
				synctest.Wait() // in line in order
			}
			time.Sleep(time.Minute)
			cancels[0]() // the head of the line leaves
			r := <-results
			assert.Equal(t, 0, r.i)
			assert.ErrorIs(t, r.err, context.Canceled)
			assert.Equal(t, time.Minute, r.at)
			time.Sleep(time.Minute)
			cancels[2]() // the tail leaves
			r = <-results
			assert.Equal(t, 2, r.i)
			assert.ErrorIs(t, r.err, context.Canceled)
			r = <-results
			assert.Equal(t, 1, r.i, "the one left is served when a key returns")
			assert.NoError(t, r.err)
			assert.Equal(t, 10*time.Minute, r.at)
			assert.Zero(t, pool.lines.waiting.Load(), "requests left in line")
			cancels[1]()
		})
	})
	t.Run("through the transport the body is closed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			pool, err := New("test", []Key{{Secret: "sk-a"}}, WithLimits(Limits{RPM: 1}), WaitForKey(time.Hour))
			require.NoError(t, err)
			rt := pool.Transport(closingBase(200))
			first, _ := http.NewRequest(http.MethodGet, "http://vendor.test/v1beta/models/m:generateContent", nil)
			resp, err := rt.RoundTrip(first)
			require.NoError(t, err)
			resp.Body.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			body := &closeCounter{Reader: strings.NewReader(`{"contents":[]}`)}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://vendor.test/v1beta/models/m:generateContent", body)
			start := time.Now()
			_, err = rt.RoundTrip(req)
			var na *NoAvailableKeyError
			require.ErrorAs(t, err, &na, "the key returns after the deadline: fail at once")
			assert.Zero(t, time.Since(start))
			assert.Equal(t, 1, body.count(), "Close calls on the request body")

			ctx, cancel = context.WithCancel(t.Context())
			body = &closeCounter{Reader: strings.NewReader(`{"contents":[]}`)}
			req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://vendor.test/v1beta/models/m:generateContent", body)
			time.AfterFunc(30*time.Second, cancel)
			_, err = rt.RoundTrip(req)
			assert.ErrorIs(t, err, context.Canceled)
			assert.Equal(t, 30*time.Second, time.Since(start))
			assert.Equal(t, 1, body.count(), "Close calls on the request body")
		})
	})
}

func TestFaultContextCancelledWhileTheVendorAnswers(t *testing.T) {
	received := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("hold") {
			received <- struct{}{}
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	defer srv.Close()
	var ev evictions
	pool, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, OnEvict(ev.add))
	require.NoError(t, err)
	defer pool.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: pool.Transport(tr)}
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-received
		cancel()
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/v1beta/models/m:generateContent?hold", nil)
	_, err = client.Do(req)
	require.ErrorIs(t, err, context.Canceled)
	assert.Empty(t, ev.all(), "a request its caller gave up on benches nothing")
	for range 2 {
		status, err := get(t, client, srv.URL+"/v1beta/models/m:generateContent")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, status, "both keys still serve")
	}
}

// failingKeyA answers key a with status and key b with 200, both without a
// body, as RoundTrippers in tests often do and http.Client accepts.
func failingKeyA(status int) roundTripFunc {
	return func(r *http.Request) (*http.Response, error) {
		if keyOf(r) == "sk-b" {
			status = http.StatusOK
		}
		return &http.Response{StatusCode: status, Header: http.Header{}, Request: r}, nil
	}
}

func TestFaultBaseTransportFails(t *testing.T) {
	boom := errors.New("connection reset by peer")
	tests := []struct {
		name string
		base roundTripFunc
		auth Option
		// want is what the caller gets: an error that errors.Is finds, a
		// text in the error, or the status of an answer.
		want       error
		wantText   string
		wantStatus int
	}{
		{name: "an error", base: func(*http.Request) (*http.Response, error) { return nil, boom }, want: boom},
		{name: "an error quoting the URL with the key", auth: QueryAuth("key"),
			base: func(r *http.Request) (*http.Response, error) {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused " + r.URL.String())}
			},
			wantText: "key=[redacted]"},
		{name: "neither an answer nor an error", base: func(*http.Request) (*http.Response, error) { return nil, nil },
			wantText: "neither an answer nor an error"},
		{name: "a success without a body", wantStatus: 200, base: func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{}, Request: r}, nil
		}},
		{name: "a throttle without a body", wantStatus: 200, base: failingKeyA(http.StatusTooManyRequests)},
		{name: "a server error without a body", wantStatus: 200, base: failingKeyA(http.StatusServiceUnavailable)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ev evictions
			pool, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}},
				OnEvict(ev.add), WithLimits(Limits{RPM: 10, TPM: 1 << 20}), tt.auth)
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat/completions", strings.NewReader(chatBodyM))
			resp, err := pool.Transport(tt.base).RoundTrip(req)
			if tt.wantStatus != 0 {
				require.NoError(t, err)
				assert.Equal(t, tt.wantStatus, resp.StatusCode)
				b, err := io.ReadAll(resp.Body)
				assert.NoError(t, err)
				assert.Empty(t, b)
				require.NoError(t, resp.Body.Close())
				return
			}
			require.Error(t, err)
			assert.Nil(t, resp)
			if tt.want != nil {
				assert.ErrorIs(t, err, tt.want)
			}
			assert.Contains(t, err.Error(), tt.wantText)
			assert.NotContains(t, err.Error(), "sk-a")
			assert.Empty(t, ev.all(), "no answer benches nothing")
			assert.Zero(t, usage(t, pool, "a").Usage.MinuteRequests, "a request without an answer is given back")
		})
	}
}

// failingDisk makes a Badger store's writes fail while it is failing.
type failingDisk struct{ failing atomic.Bool }

var errDiskFull = errors.New("no space left on device")

// install puts the disk under s. No write may run at the time.
func (d *failingDisk) install(s *BadgerStore) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	update, flush := s.update, s.flushBatch
	s.update = func(fn func(*badger.Txn) error) error {
		if d.failing.Load() {
			return errDiskFull
		}
		return update(fn)
	}
	s.flushBatch = func(wb *badger.WriteBatch) error {
		if d.failing.Load() {
			return errDiskFull
		}
		return flush(wb)
	}
}

func TestFaultStoreFailsWrites(t *testing.T) {
	dir := t.TempDir()
	clock := newTestClock()
	var logs logLines
	failures := func() int { return logs.count(spellStarts) }
	s, err := OpenBadgerStore(dir, WithFlushInterval(time.Hour), WithBadgerLogger(logs.logger()))
	require.NoError(t, err)
	var disk failingDisk
	disk.install(s)
	pool, err := New("openai", threeKeys(), WithStore(s), WithClock(clock.Now), WithLimits(Limits{RPM: 100, RPD: 1000}))
	require.NoError(t, err)

	disk.failing.Store(true)
	seen := map[string]bool{}
	for i := range 10 {
		err := pool.Do(t.Context(), "m", func(_ context.Context, k Key) error {
			first := !seen[k.ID]
			seen[k.ID] = true
			switch {
			case first && k.ID == "a":
				return &ProviderError{Kind: KindQuota, Window: WindowDaily, ResetAt: clock.Now().Add(3 * time.Hour)}
			case first && k.ID == "b":
				return &ProviderError{Kind: KindAuth, Status: 401}
			}
			return nil
		})
		require.NoError(t, err, "request %d: the pool serves from memory", i)
	}
	for range 3 {
		require.ErrorIs(t, s.Flush(t.Context()), errDiskFull)
	}
	assert.Equal(t, 1, failures(), "failures reported: once, however many writes fail")
	want := pool.Stats()
	require.Equal(t, KindQuota, want[0].Models[0].Bench.Kind, "key a is benched in memory")
	require.Equal(t, KindAuth, want[1].Bench.Kind, "key b is benched in memory")

	disk.failing.Store(false)
	require.NoError(t, s.Flush(t.Context()), "the disk is back")
	disk.failing.Store(true)
	require.Error(t, s.Flush(t.Context()))
	assert.Equal(t, 2, failures(), "a failure after a write that succeeded is reported again")
	disk.failing.Store(false)
	require.NoError(t, pool.Close())
	require.NoError(t, s.Close())

	s, err = OpenBadgerStore(dir)
	require.NoError(t, err)
	defer s.Close()
	pool, err = New("openai", threeKeys(), WithStore(s), WithClock(clock.Now), WithLimits(Limits{RPM: 100, RPD: 1000}))
	require.NoError(t, err)
	defer pool.Close()
	got := pool.Stats()
	for i := range want {
		assert.Equal(t, want[i].Bench, got[i].Bench, "key %s bench after a restart", want[i].ID)
		assert.Equal(t, want[i].Models, got[i].Models, "key %s windows and benches after a restart", want[i].ID)
	}
}
