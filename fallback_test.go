package keypool

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// simRoute starts a vendorsim with keys of the given daily quota and returns
// a route to it whose pool knows that quota.
func simRoute(t *testing.T, name string, clock *testClock, rpd int64, keys ...string) (Route, *vendorsim.Server) {
	t.Helper()
	cfg := vendorsim.Config{Dialect: vendorsim.OpenAI, Clock: clock.Now}
	var pk []Key
	for _, k := range keys {
		cfg.Keys = append(cfg.Keys, vendorsim.Key{Secret: k, ID: k, Limits: vendorsim.Limits{RPD: rpd}})
		pk = append(pk, Key{Secret: k, ID: k})
	}
	sim := vendorsim.Start(cfg)
	t.Cleanup(sim.Close)
	pool, err := New(name, pk, WithClock(clock.Now), WithLimits(Limits{RPD: rpd}))
	require.NoError(t, err)
	u, _ := url.Parse(sim.URL())
	return Route{Name: name, Pool: pool, URL: u}, sim
}

func chatRequest(t *testing.T, model string) *http.Request {
	t.Helper()
	body := `{"model":"` + model + `","messages":[{"role":"user","content":"hello"}]}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://proxy.invalid/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	return req
}

func TestFallbackMovesOnWhenQuotaRunsOutAndBack(t *testing.T) {
	clock := newTestClock()
	first, simA := simRoute(t, "free-a", clock, 3, "a1")
	second, simB := simRoute(t, "free-b", clock, 100, "b1", "b2")
	var events []RouteEvent
	fb, err := NewFallback([]Route{first, second}, WithClock(clock.Now), OnRoute(func(e RouteEvent) { events = append(events, e) }))
	require.NoError(t, err)
	send := func() (*http.Response, error) {
		resp, err := fb.RoundTrip(chatRequest(t, "gpt-4o-mini"))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	for i := range 6 {
		resp, err := send()
		require.NoError(t, err, "request %d", i)
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
	}
	assert.Equal(t, int64(3), simA.Totals().Served)
	assert.Equal(t, int64(3), simB.Totals().Served, "the second route took over without a failure")
	assert.Zero(t, simA.Totals().RateLimited, "the first route's pool knew its quota: the vendor never refused")
	require.Len(t, events, 6)
	assert.Equal(t, "free-b", events[3].Route)
	require.Len(t, events[3].Skipped, 1)
	assert.Equal(t, RouteSkip{Route: "free-a", Kind: KindRate, Until: events[3].Skipped[0].Until}, events[3].Skipped[0], "its pool had no key free")
	assert.True(t, events[4].Skipped[0].Earlier, "the first route is benched until its quota returns")
	assert.Equal(t, KindRate, events[4].Skipped[0].Kind)
	back := events[3].Skipped[0].Until
	assert.True(t, back.After(clock.Now().Add(23*time.Hour)), "rests about a day, not a minute: %v", back.Sub(clock.Now()))

	clock.Advance(back.Sub(clock.Now()))
	_, err = send()
	require.NoError(t, err)
	assert.Equal(t, "free-a", events[len(events)-1].Route, "back on the first route when its quota resets")
}

func TestFallbackAllRoutesOut(t *testing.T) {
	clock := newTestClock()
	first, _ := simRoute(t, "a", clock, 1, "a1")
	second, _ := simRoute(t, "b", clock, 1, "b1")
	fb, err := NewFallback([]Route{first, second}, WithClock(clock.Now))
	require.NoError(t, err)
	for range 2 {
		resp, err := fb.RoundTrip(chatRequest(t, "m"))
		require.NoError(t, err)
		resp.Body.Close()
	}
	_, err = fb.RoundTrip(chatRequest(t, "m"))
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	assert.True(t, na.RetryAt.After(clock.Now().Add(23*time.Hour)))
	var pe *ProviderError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, na.RetryAt.Sub(clock.Now()), pe.RetryAfter)
}

// recordingVendor records the paths and bodies it gets and answers with
// the given status.
type recordingVendor struct {
	mu     sync.Mutex
	got    []string
	status int
}

func (v *recordingVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	v.mu.Lock()
	v.got = append(v.got, r.URL.Path+" "+string(b))
	v.mu.Unlock()
	if v.status != 0 {
		w.WriteHeader(v.status)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, line := range []string{"data: one", "", "data: two", ""} {
		_, _ = io.WriteString(w, line+"\n")
		w.(http.Flusher).Flush()
	}
}

func TestFallbackRouteFailureMapsModelsAndReplays(t *testing.T) {
	down := &recordingVendor{status: http.StatusServiceUnavailable}
	up := &recordingVendor{}
	srvDown, srvUp := httptest.NewServer(down), httptest.NewServer(up)
	t.Cleanup(srvDown.Close)
	t.Cleanup(srvUp.Close)
	clock := newTestClock()
	poolDown, _ := New("down", []Key{{Secret: "sk-d"}}, WithClock(clock.Now))
	poolUp, _ := New("up", []Key{{Secret: "sk-u"}}, WithClock(clock.Now))
	uDown, _ := url.Parse(srvDown.URL + "/openai")
	uUp, _ := url.Parse(srvUp.URL)
	fb, err := NewFallback([]Route{
		{Name: "down", Pool: poolDown, URL: uDown},
		{Name: "up", Pool: poolUp, URL: uUp, Models: map[string]string{"gpt-4o-mini": "llama-3.1-8b", "gemini-2.0-flash": "gemini-2.5-flash"}},
	}, WithClock(clock.Now))
	require.NoError(t, err)

	resp, err := fb.RoundTrip(chatRequest(t, "gpt-4o-mini"))
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	var got []string
	for lines.Scan() {
		got = append(got, lines.Text())
	}
	assert.Equal(t, []string{"data: one", "", "data: two", ""}, got, "the stream passes through")
	require.Len(t, down.got, 1, "sent once to the failing route")
	assert.Equal(t, `/openai/v1/chat/completions {"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`, down.got[0])
	require.Len(t, up.got, 1)
	assert.Equal(t, `/v1/chat/completions {"model":"llama-3.1-8b","messages":[{"role":"user","content":"hello"}]}`, up.got[0],
		"the body is replayed with the model renamed for the route")

	// The failing route rests a minute (a transient failure): the next
	// request goes straight to the second.
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://proxy.invalid/v1beta/models/gemini-2.0-flash:generateContent", strings.NewReader(`{}`))
	resp2, err := fb.RoundTrip(req)
	require.NoError(t, err)
	resp2.Body.Close()
	assert.Len(t, down.got, 1)
	assert.Equal(t, `/v1beta/models/gemini-2.5-flash:generateContent {}`, up.got[1], "the path's model is renamed too")
	st := fb.Status()
	assert.Equal(t, clock.Now().Add(time.Minute), st[0].BenchedUntil)
	assert.Zero(t, st[1].BenchedUntil)
}

func TestNewFallbackRejects(t *testing.T) {
	p, _ := New("p", []Key{{Secret: "s"}})
	u, _ := url.Parse("https://api.example.com")
	one := []Route{{Pool: p, URL: u}}
	tests := []struct {
		name   string
		routes []Route
		opts   []Option
		want   string
	}{
		{"none", nil, nil, "no routes"},
		{"no pool", []Route{{URL: u}}, nil, "route 0 has no pool"},
		{"a zero pool", []Route{{URL: u, Pool: &Pool{}}}, nil, "route 0 has no pool made by New"},
		{"no URL", []Route{{Pool: p}}, nil, "route 0 needs an http or https URL"},
		{"same name", []Route{{Pool: p, URL: u}, {Pool: p, URL: u}}, nil, `two routes named "api.example.com"`},
		{"a pool's option", one, []Option{WithLimits(Limits{RPM: 1})}, "WithLimits does not configure a Fallback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFallback(tt.routes, tt.opts...)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	_, err := NewFallback(one, WithClock(time.Now), OnRoute(func(RouteEvent) {}), nil)
	assert.NoError(t, err, "WithClock and OnRoute configure a Fallback; nil is ignored")
}

func TestMapModel(t *testing.T) {
	models := map[string]string{"a": "b\"quoted"}
	tests := []struct{ in, want string }{
		{`{"model":"a","x":1}`, `{"model":"b\"quoted","x":1}`},
		{`{"nested":{"model":"a"},"model":"c"}`, `{"nested":{"model":"a"},"model":"c"}`},
		{`{"model": "a"}`, `{"model": "b\"quoted"}`},
		{`not json`, `not json`},
		{`{"model":"a"`, `{"model":"b\"quoted"`},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, string(mapModel([]byte(tt.in), models)), "mapModel(%s)", tt.in)
	}
	assert.Equal(t, `{"model":"a"}`, string(mapModel([]byte(`{"model":"a"}`), nil)))
}

// A path that climbs out of a route's base path never reaches the vendor,
// with a key or without.
func TestFallbackRefusesPathsLeavingTheRoute(t *testing.T) {
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	pool, err := New("p", []Key{{Secret: "sk-route"}})
	require.NoError(t, err)
	u, _ := url.Parse(srv.URL + "/openai")
	fb, err := NewFallback([]Route{{Name: "r", Pool: pool, URL: u}})
	require.NoError(t, err)
	for _, target := range []string{"/v1/%2e%2e/%2e%2e/admin", "/v1/../../admin", "/..", "/v1/..%2f..%2fadmin"} {
		req, err := http.NewRequest(http.MethodGet, "http://proxy.invalid"+target, nil)
		require.NoError(t, err)
		_, err = fb.RoundTrip(req)
		assert.ErrorContains(t, err, "leaves the route's base path", "target %s", target)
	}
	assert.Empty(t, seen, "nothing reached the vendor")
	req, _ := http.NewRequest(http.MethodGet, "http://proxy.invalid/v1/models/a..b", nil)
	resp, err := fb.RoundTrip(req)
	require.NoError(t, err, "two dots inside a segment are a name")
	resp.Body.Close()
	assert.Equal(t, []string{"/openai/v1/models/a..b"}, seen)
}

// The fallback hands each route's pool the body it read, which the pool
// reads without a copy of its own.
func TestFallbackBodyIsReadOnce(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	t.Cleanup(srv.Close)
	pool, err := New("p", []Key{{Secret: "sk-route"}}, WithLimits(Limits{TPM: 1 << 30}))
	require.NoError(t, err)
	u, _ := url.Parse(srv.URL)
	fb, err := NewFallback([]Route{{Name: "r", Pool: pool, URL: u}})
	require.NoError(t, err)
	body := `{"model":"m","input":"` + strings.Repeat("x", 256<<10) + `"}`
	send := func() {
		req, _ := http.NewRequest(http.MethodPost, "http://proxy.invalid/v1/chat", strings.NewReader(body))
		resp, err := fb.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	send()
	allocated := testing.AllocsPerRun(20, send)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	before := ms.TotalAlloc
	for range 20 {
		send()
	}
	runtime.ReadMemStats(&ms)
	perRequest := (ms.TotalAlloc - before) / 20
	assert.Less(t, perRequest, uint64(2*len(body)), "one copy of a %d-byte body per request, not two: %d bytes allocated (%v allocations)", len(body), perRequest, allocated)
}

// A RoundTripper must not change the request it is given: the route's URL,
// its model's name and the key go on a copy.
func TestFallbackLeavesTheCallersRequestAlone(t *testing.T) {
	var got *http.Request
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return okResponse(r), nil
	})
	pool, err := New("route", []Key{{Secret: "sk-route"}})
	require.NoError(t, err)
	u, _ := url.Parse("https://vendor.test/base")
	fb, err := NewFallback([]Route{{Name: "route", Pool: pool, URL: u, Base: base, Models: map[string]string{"gpt-4o-mini": "their-model-name"}}})
	require.NoError(t, err)
	req := chatRequest(t, "gpt-4o-mini")
	req.Header.Set("Content-Length", "71")
	req.Header.Set("X-Caller", "kept")
	before := req.Header.Clone()
	resp, err := fb.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "http://proxy.invalid/v1/chat/completions", req.URL.String())
	assert.Equal(t, before, req.Header, "the caller's header, untouched")
	require.NotNil(t, got)
	assert.Equal(t, "https://vendor.test/base/v1/chat/completions", got.URL.String())
	assert.Equal(t, "Bearer sk-route", got.Header.Get("Authorization"))
	assert.Equal(t, "kept", got.Header.Get("X-Caller"))
	assert.NotEqual(t, "71", got.Header.Get("Content-Length"), "the renamed body's length")
	assert.Same(t, req, resp.Request)
}

func TestSizeIs(t *testing.T) {
	tests := []struct {
		values []string
		n      int
		want   bool
	}{
		{[]string{"71"}, 71, true},
		{[]string{"71"}, 72, false},
		{[]string{"71", "71"}, 71, false}, // net/http refuses a repeated length
		{[]string{" 71"}, 71, false},
		{[]string{"x"}, 0, false},
		{nil, 0, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, sizeIs(tt.values, tt.n), "%q against %d", tt.values, tt.n)
	}
}

// TestJoinPathIsJoin holds joinPath to path.Join's result on the paths a
// route sees, and to no allocation for the common one.
func TestJoinPathIsJoin(t *testing.T) {
	for _, base := range []string{"", "/", "/v1", "/v1/", "/openai/v1"} {
		for _, p := range []string{"", "/", "/v1/chat/completions", "/v1//chat", "/a/./b", "/a/../b", "v1/x", "/x/"} {
			assert.Equal(t, path.Join("/", base, p), joinPath(base, p), "base %q, path %q", base, p)
		}
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = joinPath("", "/v1/chat/completions") }))
}

// A context that names routes keeps a Fallback's request off the others,
// and fails as every route benched would when none named can take it.
func TestOnlyRoutesKeepsARequestOffOtherRoutes(t *testing.T) {
	clock := newTestClock()
	first, simA := simRoute(t, "free-a", clock, 100, "a1")
	second, simB := simRoute(t, "free-b", clock, 1, "b1")
	fb, err := NewFallback([]Route{first, second}, WithClock(clock.Now))
	require.NoError(t, err)
	send := func(names ...string) error {
		req := chatRequest(t, "gpt-4o-mini")
		req = req.WithContext(OnlyRoutes(req.Context(), names...))
		resp, err := fb.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, send("free-b"))
	err = send("free-b") // b's one request a day is spent; a is not for it
	var na *NoAvailableKeyError
	assert.True(t, errors.As(err, &na), "second request only to free-b: err = %v, want *NoAvailableKeyError", err)
	assert.Equal(t, int64(0), simA.Totals().Requests, "requests free-a received")
	assert.Equal(t, int64(1), simB.Totals().Requests, "requests free-b received")
	require.NoError(t, send()) // no names: every route
	assert.Equal(t, int64(1), simA.Totals().Requests, "requests free-a received with no names")
}
