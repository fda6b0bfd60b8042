package keypool

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/windowspec"
)

// TestAffinityPinnedChainOnAPaidKeyStaysThere: a response made on a paid
// key (the free key's minute was full) is kept by the paid key's
// organisation only; the next turn naming it must go back to the paid key,
// not to the free key that has room again, which refuses it 400
// previous_response_not_found.
func TestAffinityPinnedChainOnAPaidKeyStaysThere(t *testing.T) {
	clock := newTestClock()
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "free", Limits: Limits{RPM: 1}}, {Secret: "paid", Paid: true}}
	pool, err := New("openai", keys, WithClock(clock.Now))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	status, _ := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"warm"}`)
	require.Equal(t, http.StatusOK, status)
	status, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, []string{"free", "paid"}, v.Served(0))

	clock.Advance(time.Minute + windowspec.ExactGuard) // the free key has room again
	status, _ = respond(t, client, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
	assert.Equal(t, http.StatusOK, status, "the turn reaches the key that made %s: served %v", id, v.Served(0))
}

// TestAffinityOneOffNamesDoNotEvictResponseChains: requests that each name
// a conversation of their own (a new X-Session-Id each time — a client
// naming every request anew, or one flooding the pool) must not push out
// the response IDs the vendor keeps for one organisation: the next turn of
// a Responses chain made before them still reaches the key that made it.
func TestAffinityOneOffNamesDoNotEvictResponseChains(t *testing.T) {
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "k1"}, {Secret: "k2"}, {Secret: "k3"}, {Secret: "k4"}}
	pool, err := New("openai", keys, WithClock(newTestClock().Now), WithAffinityMemory(64, time.Hour))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	status, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	require.Equal(t, http.StatusOK, status)
	for i := range 64 {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-5","messages":[]}`))
		req.Header.Set("X-Session-Id", fmt.Sprintf("one-off-%d", i))
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	for i := range 3 {
		var status int
		status, id = respond(t, client, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
		require.Equal(t, http.StatusOK, status, "turn %d reaches the key that made the chain: served %v", i, v.Served(0)[65:])
	}
}

// TestPanicDuringAProbeEndsTheProbe: a key returning from a bench takes one
// request at a time (its probe). When Pool.Do's function panics on the
// probe, the panic goes on, but the probe must end with it: otherwise the
// key refuses every later request for the model, "a probe under way",
// for good.
func TestPanicDuringAProbeEndsTheProbe(t *testing.T) {
	clock := newTestClock()
	p, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, WithClock(clock.Now))
	require.NoError(t, err)
	defer p.Close()
	ctx := t.Context()
	require.NoError(t, p.Disable(ctx, "b", "only a serves"))
	// a's quota is spent, dating nothing: benched 2 minutes, returning carefully.
	err = p.Do(ctx, "m", func(context.Context, Key) error {
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

// TestPanicInOnEvictDuringAProbeEndsTheProbe: the transport's side of the
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
	p, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, WithClock(clock.Now),
		OnEvict(func(Eviction) {
			if evictions++; evictions == 2 {
				panic("the hook's bug")
			}
		}))
	require.NoError(t, err)
	defer p.Close()
	require.NoError(t, p.Disable(t.Context(), "b", "only a serves"))
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

// TestOneProbeAtATimeAcrossAModelAndTheWholeKey: a key benched for one
// model and then for every model (a spent balance) returns carefully,
// one request at a time — for every model once its whole-key bench is
// over. While the probe for the one model is under way, a request for
// another model must not be sent as a second probe.
func TestOneProbeAtATimeAcrossAModelAndTheWholeKey(t *testing.T) {
	clock := newTestClock()
	p, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, WithClock(clock.Now))
	require.NoError(t, err)
	defer p.Close()
	ctx := t.Context()
	require.NoError(t, p.Disable(ctx, "b", "only a serves"))
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

// TestAffinityReadsPreviousResponseWhenTheModelComesFromElsewhere: a pool
// that knows the model without the body (WithModelFunc here; a model in the
// path likewise) and counts no tokens skips reading the body, and with it
// the previous_response_id that only the key that made it can answer: the
// chain goes round the keys and is refused 400. A soft name can be missed
// at the cost of a cache; this one cannot.
func TestAffinityReadsPreviousResponseWhenTheModelComesFromElsewhere(t *testing.T) {
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "k1"}, {Secret: "k2"}, {Secret: "k3"}}
	pool, err := New("openai", keys, WithClock(newTestClock().Now),
		WithModelFunc(func(*http.Request) string { return "gpt-5" }))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	status, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	require.Equal(t, http.StatusOK, status)
	for i := range 3 {
		status, id = respond(t, client, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
		require.Equal(t, http.StatusOK, status, "turn %d: served %v", i, v.Served(0))
	}
}
