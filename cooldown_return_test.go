package keypool

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// After a bench of a minute or more, a key takes one request at a time
// until one succeeds: 20 requests at once send exactly one to it.
func TestReturningKeyTakesOneRequestUntilItAnswers(t *testing.T) {
	clock := newTestClock()
	release := make(chan struct{})
	var toA, toB atomic.Int64
	var firstA sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Authorization") {
		case "Bearer sk-a":
			n := toA.Add(1)
			if n == 1 {
				w.Header().Set("Retry-After", "120")
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			firstA.Do(func() { <-release }) // the returning key's one request, held
		default:
			toB.Add(1)
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	pool, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, WithClock(clock.Now))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	send := func() {
		resp, err := client.Post(srv.URL+"/v1/chat", "application/json", strings.NewReader(`{"model":"m"}`))
		if assert.NoError(t, err) {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
		}
	}
	send() // a answers 429 for two minutes; b serves
	require.Equal(t, int64(1), toA.Load())
	clock.Advance(2*time.Minute + time.Second)

	var wg sync.WaitGroup
	for range 20 {
		wg.Go(send)
	}
	require.Eventually(t, func() bool { return toA.Load()+toB.Load() == 1+1+20 }, 5*time.Second, time.Millisecond,
		"19 requests go to b while a's one request is under way")
	assert.Equal(t, int64(2), toA.Load(), "exactly one request went to the returning key")
	close(release)
	wg.Wait()
	before := toA.Load()
	for range 4 {
		send()
	}
	assert.Equal(t, before+2, toA.Load(), "once it answered, the key takes its turns again")
}

// A returning key whose one request fails is benched again and takes one
// request again when that bench is over.
func TestReturningKeyThatFailsAgainIsBenchedAgain(t *testing.T) {
	clock := newTestClock()
	var ev evictions
	p, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, WithClock(clock.Now), OnEvict(ev.add))
	require.NoError(t, err)
	quota := &ProviderError{Kind: KindQuota, Status: 429}
	failA := func(_ context.Context, k Key) error {
		if k.ID == "a" {
			return quota
		}
		return nil
	}
	require.NoError(t, p.Do(t.Context(), "m", failA))
	require.Len(t, ev.all(), 1)
	clock.Advance(ev.all()[0].For)
	var sent []string
	for range 4 {
		require.NoError(t, p.Do(t.Context(), "m", func(ctx context.Context, k Key) error {
			sent = append(sent, k.ID)
			return failA(ctx, k)
		}))
	}
	assert.Equal(t, 1, strings.Count(strings.Join(sent, ","), "a"), "the returning key failed once and is benched again: %v", sent)
	require.Len(t, ev.all(), 2)
	assert.Equal(t, 10*time.Minute, ev.all()[1].Latest.Sub(clock.Now()), "the next quota level")
	assert.Equal(t, 5*time.Minute, ev.all()[1].For, "looked at early")
}

// A key returning from a bench takes one
// request at a time (its probe). When Pool.Do's function panics on the
// probe, the panic goes on, but the probe must end with it: otherwise the
// key refuses every later request for the model, "a probe under way",
// for good.
func TestPanicDuringAProbeEndsTheProbe(t *testing.T) {
	clock := newTestClock()
	p := onlyAServes(t, clock)
	ctx := t.Context()
	// a's quota is spent, dating nothing: benched 2 minutes, returning carefully.
	err := p.Do(ctx, "m", func(context.Context, Key) error {
		return &ProviderError{Kind: KindQuota, Status: http.StatusTooManyRequests}
	})
	require.Error(t, err)
	clock.Advance(3 * time.Minute)
	func() {
		defer func() { require.NotNil(t, recover()) }()
		_ = p.Do(ctx, "m", func(context.Context, Key) error { panic("the caller's bug") })
	}()
	clock.Advance(time.Minute)
	assert.NoError(t, p.Do(ctx, "m", func(context.Context, Key) error { return nil }), "a takes requests again after the panicked probe")
}

// The transport's side of the
// same: OnEvict panics at the bench a failed probe sets; the probe ends.
func TestPanicInOnEvictDuringAProbeEndsTheProbe(t *testing.T) {
	clock := newTestClock()
	fail := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fail {
			w.WriteHeader(http.StatusPaymentRequired)
			_, _ = w.Write([]byte(`{"error":{"code":"insufficient_quota"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(srv.Close)
	evictions := 0
	p := onlyAServes(t, clock, OnEvict(func(Eviction) {
		if evictions++; evictions == 2 {
			panic("the hook's bug")
		}
	}))
	client := &http.Client{Transport: p.Transport(nil)}
	post := func() (*http.Response, error) {
		return client.Post(srv.URL, "application/json", strings.NewReader(`{"model":"m"}`))
	}
	if resp, err := post(); err == nil { // a benched, no other key: the pool says so
		_ = resp.Body.Close()
	}
	require.Equal(t, 1, evictions)
	clock.Advance(6 * time.Minute) // past the first early look
	func() {
		defer func() { require.NotNil(t, recover(), "OnEvict's panic goes on") }()
		_, _ = post() // the probe, failing again
	}()
	require.Equal(t, 2, evictions)
	fail = false
	clock.Advance(time.Hour)
	resp, err := post()
	require.NoError(t, err, "a takes requests again after the panicked probe")
	_ = resp.Body.Close()
}

// A key benched for one
// model and then for every model (a spent balance) returns carefully,
// one request at a time — for every model once its whole-key bench is
// over. While the probe for the one model is under way, a request for
// another model must not be sent as a second probe.
func TestOneProbeAtATimeAcrossAModelAndTheWholeKey(t *testing.T) {
	clock := newTestClock()
	p := onlyAServes(t, clock)
	ctx := t.Context()
	require.Error(t, p.Do(ctx, "m", func(context.Context, Key) error {
		return &ProviderError{Kind: KindQuota, Status: http.StatusTooManyRequests} // m: 2 minutes
	}))
	require.Error(t, p.Do(ctx, "m2", func(context.Context, Key) error {
		return &ProviderError{Kind: KindQuota, Status: http.StatusPaymentRequired} // every model: first look at 5 minutes
	}))
	clock.Advance(6 * time.Minute)
	second := false
	require.NoError(t, p.Do(ctx, "m", func(context.Context, Key) error {
		// The probe of a's return is under way: a request for m2 waits.
		_ = p.Do(ctx, "m2", func(context.Context, Key) error {
			second = true
			return nil
		})
		return nil
	}))
	assert.False(t, second, "a second request reached a while its one probe was under way")
}

// A hook that panics at the bench a failed probe of Pool.Do sets — OnEvict
// here — ends the probe with it, as the transport's does.
func TestPanicInOnEvictDuringADoProbeEndsTheProbe(t *testing.T) {
	clock := newTestClock()
	evictions := 0
	p := onlyAServes(t, clock, OnEvict(func(Eviction) {
		if evictions++; evictions == 2 {
			panic("the hook's bug")
		}
	}))
	ctx := t.Context()
	spent := func(context.Context, Key) error {
		return &ProviderError{Kind: KindQuota, Status: http.StatusPaymentRequired}
	}
	require.Error(t, p.Do(ctx, "m", spent))
	require.Equal(t, 1, evictions)
	clock.Advance(6 * time.Minute) // past the first early look
	func() {
		defer func() { require.NotNil(t, recover(), "OnEvict's panic goes on") }()
		_ = p.Do(ctx, "m", spent) // the probe, failing again
	}()
	require.Equal(t, 2, evictions)
	clock.Advance(time.Hour)
	assert.NoError(t, p.Do(ctx, "m", func(context.Context, Key) error { return nil }), "a takes requests again after the panicked probe")
}

// onlyAServes returns a pool of the keys a and b, on clock, with b
// disabled: a is the one key that serves, and a bench of a leaves no other.
func onlyAServes(t *testing.T, clock *testClock, opts ...Option) *Pool {
	t.Helper()
	p, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, append([]Option{WithClock(clock.Now)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	require.NoError(t, p.Disable(t.Context(), "b", "only a serves"))
	return p
}
