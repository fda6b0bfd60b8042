package keypool

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoShape is how one vendor quotes what a request sent in its 400.
type echoShape struct {
	name string
	// field: the shape quotes an unknown field's name; else the model's.
	field bool
	body  func(quoted string) string
}

// echoShapes are four vendors' 400s that quote the request, as they word
// them.
var echoShapes = []echoShape{
	{"openai", true, func(q string) string {
		return fmt.Sprintf(`{"error":{"message":"Unrecognized request argument supplied: %s","type":"invalid_request_error","param":null,"code":null}}`, q)
	}},
	{"gemini", true, func(q string) string {
		msg := fmt.Sprintf(`Invalid JSON payload received. Unknown name \"%s\": Cannot find field.`, q)
		return fmt.Sprintf(`{"error":{"code":400,"message":"%s","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.BadRequest","fieldViolations":[{"field":"%s","description":"%s"}]}]}}`, msg, q, msg)
	}},
	{"anthropic", true, func(q string) string {
		return fmt.Sprintf(`{"type":"error","error":{"type":"invalid_request_error","message":"%s: Extra inputs are not permitted"}}`, q)
	}},
	{"openrouter", false, func(q string) string {
		return fmt.Sprintf(`{"error":{"message":"%s is not a valid model ID","code":400},"user_id":"user_2x"}`, q)
	}},
}

// hostileWords are what a request may name to make a vendor's 400 read as
// a spent balance, a refused key or a limit.
var hostileWords = []string{
	"insufficient_quota",
	"credit balance is too low",
	"api key not valid",
	"API_KEY_INVALID",
	"Rate limit reached. Please try again in 12h",
	"usage_limit_reached per day",
	"spend limit",
	"out of credits",
}

// echoVendor answers as shape does: a request naming a field other than
// model and messages, or a model other than "good-model", gets the 400 that
// quotes it, from every key alike; any other request 200.
type echoVendor struct {
	shape echoShape
	mu    sync.Mutex
	sent  int
}

func (v *echoVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v.mu.Lock()
	v.sent++
	v.mu.Unlock()
	var req map[string]any
	_ = json.NewDecoder(r.Body).Decode(&req)
	var quoted string
	for k := range req {
		if k != "model" && k != "messages" {
			quoted = k
		}
	}
	if m, _ := req["model"].(string); !v.shape.field && m != "good-model" {
		quoted = m
	}
	if quoted == "" {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`)
		return
	}
	w.WriteHeader(http.StatusBadRequest)
	_, _ = io.WriteString(w, v.shape.body(quoted))
}

func (v *echoVendor) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.sent
}

// hostileBody is a request whose words shape's vendor quotes back.
func hostileBody(s echoShape, word string) string {
	w, _ := json.Marshal(word)
	if s.field {
		return fmt.Sprintf(`{"model":"good-model","messages":[],%s:1}`, w)
	}
	return fmt.Sprintf(`{"model":%s,"messages":[]}`, w)
}

func TestQuotedWordsBenchNothing(t *testing.T) {
	for _, shape := range echoShapes {
		for _, word := range hostileWords {
			t.Run(shape.name+"/"+word, func(t *testing.T) {
				v := &echoVendor{shape: shape}
				srv := httptest.NewServer(v)
				t.Cleanup(srv.Close)
				clock, ev := newTestClock(), &evictions{}
				pool, err := New("test", threeKeys(), WithClock(clock.Now), OnEvict(ev.add))
				require.NoError(t, err)
				client := &http.Client{Transport: pool.Transport(nil)}

				resp, err := client.Post(srv.URL, "application/json", strings.NewReader(hostileBody(shape, word)))
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "the vendor's answer goes back")
				assert.Contains(t, string(body), strings.SplitN(word, " ", 2)[0], "as the vendor wrote it")
				assert.LessOrEqual(t, v.count(), 2, "two keys' same answer ends the request")
				assert.Empty(t, ev.all(), "nothing is benched")
				for _, ks := range pool.Stats() {
					assert.Zero(t, ks.Bench, "key %s", ks.ID)
					for _, m := range ks.Models {
						assert.Zero(t, m.Bench, "key %s model %s", ks.ID, m.Model)
					}
				}

				for range 3 {
					resp, err = client.Post(srv.URL, "application/json", strings.NewReader(`{"model":"good-model","messages":[]}`))
					require.NoError(t, err)
					resp.Body.Close()
					assert.Equal(t, http.StatusOK, resp.StatusCode, "the next ordinary request is served")
				}
			})
		}
	}
}

// TestQuotedFailureConfirmed: a 400 whose prose says the balance is spent,
// to a request whose prompt holds those very words, benches its key only
// once another key serves the same request — for the model alone and for
// the shortest bench, the words dating nothing — and the pool goes on
// serving that key's other models.
func TestQuotedFailureConfirmed(t *testing.T) {
	f := newFixture(t)
	low := answer{status: http.StatusBadRequest, body: `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. You will regain access on 2025-04-01 at 00:00 UTC."}}`}
	f.vendor.on("sk-a", low)
	post := func(model string) int {
		resp, err := f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"What does 'credit balance is too low' mean?"}]}`))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusOK, post("m1"), "the next key serves it")
	assert.Equal(t, []string{"sk-a", "sk-b"}, f.vendor.keys())
	evs := f.ev.all()
	require.Len(t, evs, 1)
	assert.Equal(t, Eviction{Provider: "test", KeyID: "a", Model: "m1", Kind: KindQuota, For: time.Minute,
		Until: f.clock.Now().Add(time.Minute)}, evs[0], "the key for the model alone, a minute")

	assert.Equal(t, http.StatusOK, post("m2"))
	assert.Equal(t, "sk-c", f.vendor.keys()[2], "round robin goes on")
	assert.Equal(t, http.StatusOK, post("m2"))
	assert.Equal(t, "sk-a", f.vendor.keys()[3], "the key still serves another model")
	assert.Equal(t, http.StatusOK, post("m1"))
	assert.NotEqual(t, "sk-a", f.vendor.keys()[4], "but not the model it failed")
}

// TestRealFailuresStillBenchTheKey: a refused key or a spent balance said
// in prose the request holds no word of is the vendor's own word: the key is
// benched at the answer, for every model, and with two such keys of three
// every request is served.
func TestRealFailuresStillBenchTheKey(t *testing.T) {
	for name, a := range map[string]answer{
		"xai incorrect key": {status: 400, body: `"Incorrect API key provided: xai-****. You can obtain an API key from https://console.x.ai."`},
		"anthropic balance": {status: 400, body: `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`},
		"siliconflow paid":  {status: 403, body: `{"code":30011,"message":"The selected model requires paid balance. Your paid balance is insufficient. Please top up and try again.","data":null}`},
		"minimax balance":   {status: 500, body: `{"type":"error","error":{"type":"api_error","message":"insufficient balance (1008)"}}`},
		"github secondary":  {status: 403, body: `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			for range 20 {
				f.vendor.on("sk-a", a)
				f.vendor.on("sk-b", a)
			}
			for i := range 6 {
				resp, err := f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`))
				require.NoError(t, err, "request %d", i)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
			}
			assert.Len(t, f.ev.all(), 2, "both benched at their first answer")
			assert.LessOrEqual(t, len(f.vendor.received()), 8)
		})
	}
}

// TestQuotedAnswerHeldWhenNoKeyIsLeft: a quoted failure whose request no
// other key can take goes back to the caller as the vendor wrote it, with
// no bench and no wait.
func TestQuotedAnswerHeldWhenNoKeyIsLeft(t *testing.T) {
	f := newFixture(t, WaitForKey(time.Hour))
	for _, k := range []string{"sk-b", "sk-c"} {
		f.vendor.on(k, answer{status: http.StatusUnauthorized})
	}
	for range 2 {
		resp, err := f.client.Get(f.url) // a serves; then b and c, revoked, pass it to a
		require.NoError(t, err)
		resp.Body.Close()
	}
	require.Len(t, f.ev.all(), 2, "b and c benched as revoked")
	quotedBody := `{"error":{"message":"Unrecognized request argument supplied: insufficient_quota","type":"invalid_request_error","param":null,"code":null}}`
	f.vendor.on("sk-a", answer{status: http.StatusBadRequest, body: quotedBody})
	resp, err := f.client.Post(f.url, "application/json", strings.NewReader(`{"insufficient_quota":1}`))
	require.NoError(t, err, "the held answer, not an error")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, quotedBody, string(body), "whole")
	assert.Len(t, f.ev.all(), 2, "nothing more benched")
}

// TestForbiddenPathBenchesNoKey: a 403 on a path every key may not use
// (a restricted key's /v1/files) goes back after two keys, benching none;
// one key alone refused benches that key for the request's model alone.
func TestForbiddenPathBenchesNoKey(t *testing.T) {
	forbidden := answer{status: http.StatusForbidden, body: `{"error":{"message":"You have insufficient permissions for this operation. Missing scopes: api.files.read.","type":"invalid_request_error","param":null,"code":null}}`}
	t.Run("every key", func(t *testing.T) {
		f := newFixture(t)
		for _, k := range []string{"sk-a", "sk-b", "sk-c"} {
			f.vendor.on(k, forbidden)
		}
		code, err := get(t, f.client, f.url+"/v1/files")
		require.NoError(t, err)
		assert.Equal(t, http.StatusForbidden, code)
		assert.Len(t, f.vendor.received(), 2)
		assert.Empty(t, f.ev.all())
		code, err = get(t, f.client, f.url+"/v1/chat/completions")
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, code)
		assert.Equal(t, "sk-c", f.vendor.keys()[2], "every key still serves")
	})
	t.Run("one key", func(t *testing.T) {
		f := newFixture(t)
		f.vendor.on("sk-a", forbidden)
		resp, err := f.client.Post(f.url+"/v1/files", "application/json", strings.NewReader(`{"model":"m"}`))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		evs := f.ev.all()
		require.Len(t, evs, 1)
		assert.Equal(t, "a", evs[0].KeyID)
		assert.Equal(t, "m", evs[0].Model, "the key for the model, not every model")
		assert.Equal(t, KindAuth, evs[0].Kind)
	})
}

// TestVendorCodesStillBenchTheKey: the vendor's own code, or a rate-limit
// header, on a 400 or 403 is the key's: benched for every model at once,
// as before.
func TestVendorCodesStillBenchTheKey(t *testing.T) {
	tests := []struct {
		name   string
		answer answer
		kind   Kind
		every  bool
	}{
		{"gemini API_KEY_INVALID", answer{status: 400, body: `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}`}, KindAuth, true},
		{"400 insufficient_quota code", answer{status: 400, body: `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","code":"insufficient_quota"}}`}, KindQuota, true},
		{"403 remaining 0", answer{status: 403, header: map[string]string{"X-Ratelimit-Remaining": "0"}, body: `{"message":"API rate limit exceeded"}`}, KindRate, false},
		{"403 consumer suspended", answer{status: 403, body: `{"error":{"code":403,"message":"Permission denied","status":"PERMISSION_DENIED","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"CONSUMER_SUSPENDED"}]}}`}, KindAuth, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.vendor.on("sk-a", tt.answer)
			resp, err := f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"m"}`))
			require.NoError(t, err)
			resp.Body.Close()
			evs := f.ev.all()
			require.Len(t, evs, 1, "benched at the answer")
			assert.Equal(t, tt.kind, evs[0].Kind)
			assert.Equal(t, tt.every, evs[0].Model == "")
		})
	}
}

// TestQuotedEvidenceCannotHideInNestedFields: a code-named field the
// vendor echoes from the request — under a field of the request's, in a
// document carried as a string, or with prose for a value — is prose, not
// the vendor's code.
func TestQuotedEvidenceCannotHideInNestedFields(t *testing.T) {
	bodies := map[string]string{
		"pydantic input":  `{"detail":[{"type":"extra_forbidden","loc":["body","x"],"msg":"Extra inputs are not permitted","input":{"code":"insufficient_quota","reason":"API_KEY_INVALID"}}]}`,
		"string document": `{"error":{"message":"{\"error\":{\"code\":\"insufficient_quota\"}}","type":"invalid_request_error"}}`,
		"param":           `{"error":{"message":"bad","type":"invalid_request_error","param":"insufficient_quota","code":null}}`,
		"headers echoed":  `{"error":{"message":"credit balance is too low","param":{"headers":{"x-ratelimit-remaining-requests":"0","retry-after":"86400"}}}}`,
		"prose in code":   `{"error":{"message":"x","code":"your credit balance is too low"}}`,
	}
	for name, body := range bodies {
		t.Run(name, func(t *testing.T) {
			for _, status := range []int{400, 403} {
				v := classify(status, http.Header{}, []byte(body), newTestClock().Now())
				if v.kind != KindNone {
					assert.True(t, v.quoted, "status %d: %+v", status, v)
					assert.False(t, v.wholeKey())
					assert.False(t, v.ofAccount())
				}
			}
		})
	}
}

// TestQuotedRouteIsNotBenched: a Fallback passes a quoted failure to the
// next route without benching the first — another vendor may read the
// same request otherwise — and two routes' quoted failures send the
// answer back; another client's ordinary request is then served by the
// first route.
func TestQuotedRouteIsNotBenched(t *testing.T) {
	shape := echoShapes[0]
	var urls []*url.URL
	var vendors []*echoVendor
	for range 2 {
		v := &echoVendor{shape: shape}
		srv := httptest.NewServer(v)
		t.Cleanup(srv.Close)
		u, _ := url.Parse(srv.URL)
		urls, vendors = append(urls, u), append(vendors, v)
	}
	var routes []Route
	for i, u := range urls {
		pool, err := New(fmt.Sprintf("r%d", i), []Key{{Secret: "k1"}, {Secret: "k2"}})
		require.NoError(t, err)
		routes = append(routes, Route{Name: fmt.Sprintf("r%d", i), Pool: pool, URL: u})
	}
	var mu sync.Mutex
	var events []RouteEvent
	fb, err := NewFallback(routes, OnRoute(func(e RouteEvent) { mu.Lock(); events = append(events, e); mu.Unlock() }))
	require.NoError(t, err)
	client := &http.Client{Transport: fb}
	resp, err := client.Post("http://proxy.invalid/v1/chat/completions", "application/json",
		strings.NewReader(hostileBody(shape, "insufficient_quota")))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, 2, vendors[0].count())
	assert.Equal(t, 2, vendors[1].count())
	for _, st := range fb.Status() {
		assert.Zero(t, st.BenchedUntil, "route %s", st.Name)
	}
	resp, err = client.Post("http://proxy.invalid/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"good-model","messages":[]}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, 3, vendors[0].count(), "the first route serves the next client")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, events, 2)
	assert.Equal(t, "r1", events[0].Route)
	assert.True(t, slices.ContainsFunc(events[0].Skipped, func(s RouteSkip) bool { return s.Route == "r0" && s.Until.IsZero() }),
		"r0 passed over without a bench: %+v", events[0].Skipped)
	assert.Zero(t, events[0].Benched)
}

// TestEscapedModelIsTheModel: a model name written with JSON escapes is
// the model the vendor reads — limited, renamed and benched as that model
// — and one that decodes to a control character is refused before any key
// is used.
func TestEscapedModelIsTheModel(t *testing.T) {
	f := newFixture(t, WithModelLimits(map[string]Limits{"gpt-4o": {RPM: 1}}))
	// One a minute on each of three keys.
	for i := range 3 {
		resp, err := f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"gpt-4o"}`))
		require.NoError(t, err, "request %d", i)
		resp.Body.Close()
	}
	_, err := f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"\u0067pt-4o"}`))
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na, "the escaped name counts in gpt-4o's window")
	_, err = f.client.Post(f.url, "application/json", strings.NewReader(`{"mod\u0065l":"gpt-4o"}`))
	require.ErrorAs(t, err, &na, "and so does an escaped key")

	sent := len(f.vendor.received())
	_, err = f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"a\u0007b"}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "control character")
	assert.Len(t, f.vendor.received(), sent, "never sent")

	assert.Equal(t, `{"model":"openai/gpt-4o"}`,
		string(mapModel([]byte(`{"model":"\u0067pt-4o"}`), map[string]string{"gpt-4o": "openai/gpt-4o"})), "renamed as gpt-4o")
}

// TestRequestTooLargeForTheBalanceBenchesNothing: OpenRouter's 402 that a
// smaller request would be served ("requires more credits, or fewer
// max_tokens") is the request's size, not a key out of money: it benches
// no key, the answer goes back after two keys, and the next request is
// served.
func TestRequestTooLargeForTheBalanceBenchesNothing(t *testing.T) {
	f := newFixture(t)
	sized := answer{status: http.StatusPaymentRequired, body: `{"error":{"message":"This request requires more credits, or fewer max_tokens. You requested up to 10000000 tokens, but can only afford 3234.","code":402}}`}
	for _, k := range []string{"sk-a", "sk-b", "sk-c"} {
		f.vendor.on(k, sized)
	}
	resp, err := f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"m","max_tokens":10000000}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	assert.Len(t, f.vendor.received(), 2)
	assert.Empty(t, f.ev.all())
	resp, err = f.client.Post(f.url, "application/json", strings.NewReader(`{"model":"other","max_tokens":100}`))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

// poisonVendor answers 500 to any request whose body says "poison", as
// vendors do to some inputs they cannot process, and serves the others,
// counting what it was sent.
func poisonVendor(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sent.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(b), "poison") {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error"}}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"c","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &sent
}

// One request that every key fails with a server error takes no more than
// one key for a minute: the first key's 500 benches it, and the second's,
// evidence of the request (or of the vendor) more than of either key,
// benches nothing, ends the failover and goes back to the caller. Through
// a Fallback, the route is benched for none of it: the next route serves
// the request, and the first serves the next.
func TestRequestEveryKeyFailsBenchesOneKey(t *testing.T) {
	srv, sent := poisonVendor(t)
	var ev evictions
	pool, err := New("openai", threeKeys(), OnEvict(ev.add))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	post := func(c *http.Client, content string) int {
		t.Helper()
		resp, err := c.Post(srv.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"`+content+`"}]}`))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusInternalServerError, post(client, "poison"), "the vendor's answer")
	assert.Equal(t, int64(2), sent.Load(), "one failover")
	assert.Len(t, ev.all(), 1, "one key benched")
	for range 4 {
		assert.Equal(t, http.StatusOK, post(client, "hello"), "the other keys serve the other requests")
	}

	u, _ := url.Parse(srv.URL)
	first, err := New("first", threeKeys())
	require.NoError(t, err)
	second, err := New("second", threeKeys())
	require.NoError(t, err)
	var routes []RouteEvent
	fb, err := NewFallback([]Route{{Name: "first", Pool: first, URL: u}, {Name: "second", Pool: second, URL: u}},
		OnRoute(func(e RouteEvent) { routes = append(routes, e) }))
	require.NoError(t, err)
	via := &http.Client{Transport: fb}
	sent.Store(0)
	assert.Equal(t, http.StatusInternalServerError, post(via, "poison"))
	assert.Equal(t, int64(4), sent.Load(), "two keys of each route")
	assert.Equal(t, http.StatusOK, post(via, "hello"))
	require.Len(t, routes, 2)
	assert.Equal(t, "first", routes[1].Route, "the first route was benched for none of it")
}
