package keypool

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/vendorsim"
	"github.com/keypool-go/keypool/internal/windowspec"
)

func newResponsesVendor(t *testing.T) (*vendorsim.Responses, string) {
	t.Helper()
	v := &vendorsim.Responses{}
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)
	return v, srv.URL
}

// respond posts body to path through client and returns the answer's
// status and the ID it made ("" for none), read as a client reads it: a
// JSON answer's "id", a stream's response.created event's.
func respond(t *testing.T, client *http.Client, url, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var answer struct {
		ID       string
		Response struct{ ID string }
	}
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		_ = json.NewDecoder(resp.Body).Decode(&answer)
		return resp.StatusCode, answer.ID
	}
	sc := bufio.NewScanner(resp.Body)
	var id string
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok && id == "" {
			require.NoError(t, json.Unmarshal([]byte(data), &answer))
			id = answer.Response.ID
		}
	}
	return resp.StatusCode, id
}

// TestAffinityFollowsWhatTheVendorKeeps: a Responses conversation chained
// by previous_response_id, or held in a conversation object, reaches the
// key whose organisation made what it names, turn after turn, JSON or
// streamed, whether or not the pool counts tokens; without affinity the
// vendor refuses the chain.
func TestAffinityFollowsWhatTheVendorKeeps(t *testing.T) {
	keys := []Key{{Secret: "k1"}, {Secret: "k2"}, {Secret: "k3"}, {Secret: "k4"}}
	for _, tt := range []struct {
		name   string
		stream bool
		opts   []Option
	}{
		{"json", false, nil},
		{"stream", true, nil},
		{"json, tokens counted", false, []Option{WithLimits(Limits{TPM: 1 << 30})}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v, url := newResponsesVendor(t)
			pool, err := New("openai", keys, append([]Option{WithClock(newTestClock().Now)}, tt.opts...)...)
			require.NoError(t, err)
			client := &http.Client{Transport: pool.Transport(nil)}
			turn := func(prev string) string {
				body := fmt.Sprintf(`{"model":"gpt-5","input":"go on","stream":%t,"previous_response_id":%q}`, tt.stream, prev)
				if prev == "" {
					body = fmt.Sprintf(`{"model":"gpt-5","input":"hello","stream":%t}`, tt.stream)
				}
				status, id := respond(t, client, url, "/v1/responses", body)
				require.Equal(t, http.StatusOK, status, "turn after %q", prev)
				require.NotEmpty(t, id)
				return id
			}
			id := turn("")
			from := len(v.Served(0)) - 1
			for range 19 {
				id = turn(id)
			}
			chain := v.Served(from)
			require.Len(t, chain, 20)
			for _, k := range chain {
				assert.Equal(t, chain[0], k, "every turn on the key that made the last")
			}
			from = len(v.Served(0))
			for range 8 {
				turn("")
			}
			spread := map[string]bool{}
			for _, k := range v.Served(from) {
				spread[k] = true
			}
			assert.GreaterOrEqual(t, len(spread), 3, "new conversations still go round the keys")
		})
	}
	t.Run("conversation object", func(t *testing.T) {
		v, url := newResponsesVendor(t)
		pool, err := New("openai", keys, WithClock(newTestClock().Now))
		require.NoError(t, err)
		client := &http.Client{Transport: pool.Transport(nil)}
		status, conv := respond(t, client, url, "/v1/conversations", `{"metadata":{"topic":"demo"}}`)
		require.Equal(t, http.StatusOK, status)
		require.True(t, strings.HasPrefix(conv, "conv_"), conv)
		for i := range 10 {
			body := fmt.Sprintf(`{"model":"gpt-5","input":"turn","conversation":%q}`, conv)
			if i%2 == 1 {
				body = fmt.Sprintf(`{"model":"gpt-5","input":"turn","conversation":{"id":%q}}`, conv)
			}
			status, _ := respond(t, client, url, "/v1/responses", body)
			assert.Equal(t, http.StatusOK, status, "turn %d", i)
		}
		served := v.Served(0)
		for _, k := range served {
			assert.Equal(t, served[0], k)
		}
	})
	t.Run("without affinity", func(t *testing.T) {
		_, url := newResponsesVendor(t)
		pool, err := New("openai", keys, WithClock(newTestClock().Now), WithAffinityMemory(0, 0))
		require.NoError(t, err)
		client := &http.Client{Transport: pool.Transport(nil)}
		_, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
		status, _ := respond(t, client, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
		assert.Equal(t, http.StatusBadRequest, status, "round-robin sends the next turn to another organisation")
	})
}

// TestAffinityNamedAnswerToldAtOnce: the ID an answer makes is told to a
// store that shares conversations as soon as the answer is read, so that
// the next turn, at another replica, reaches the same key; and a refusal
// of an ID no key made benches nothing.
func TestAffinityNamedAnswerToldAtOnce(t *testing.T) {
	clock := newTestClock()
	v, url := newResponsesVendor(t)
	store := &sharedAffinity{Store: NewMemoryStore(), keys: map[string]string{}}
	replica := func() (*Pool, *http.Client) {
		pool, err := New("openai", []Key{{Secret: "k1"}, {Secret: "k2"}, {Secret: "k3"}}, WithClock(clock.Now), WithStore(store))
		require.NoError(t, err)
		return pool, &http.Client{Transport: pool.Transport(nil)}
	}
	_, a := replica()
	pb, b := replica()
	_, id := respond(t, a, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	assert.Equal(t, 1, store.held(), "one write, at the answer that made the ID")
	for range 5 {
		var status int
		status, id = respond(t, b, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
		require.Equal(t, http.StatusOK, status)
		_, id = respond(t, a, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
	}
	served := v.Served(0)
	for _, k := range served {
		assert.Equal(t, served[0], k, "both replicas keep the chain on its key")
	}

	status, _ := respond(t, b, url, "/v1/responses", `{"model":"gpt-5","input":"go on","previous_response_id":"resp_nobody"}`)
	assert.Equal(t, http.StatusBadRequest, status)
	for _, ks := range pb.Stats() {
		assert.Zero(t, ks.Bench, "a refused ID is the client's mistake: %s stays up", ks.ID)
	}
}

// TestAffinityReadsWhatARequestNames: previous_response_id and a
// conversation — its ID, or an object's "id" — outrank every other name
// in the body, wherever they stand; nested ones name nothing.
func TestAffinityReadsWhatARequestNames(t *testing.T) {
	name := func(b string) conversation {
		_, c, _ := readRequest([]byte(b), nil)
		return c
	}
	assert.Equal(t, conversationOf("resp_1"), name(`{"previous_response_id":"resp_1","prompt_cache_key":"k","user":"u"}`))
	assert.Equal(t, conversationOf("resp_1"), name(`{"prompt_cache_key":"k","previous_response_id":"resp_1"}`))
	assert.Equal(t, conversationOf("resp_1"), name(`{"previous_response_id":"resp_1","conversation":"conv_1"}`), "the response outranks the conversation")
	assert.Equal(t, conversationOf("conv_1"), name(`{"prompt_cache_key":"k","conversation":"conv_1"}`))
	assert.Equal(t, conversationOf("conv_2"), name(`{"conversation":{"id":"conv_2"},"user":"u"}`))
	assert.Equal(t, conversationOf("u"), name(`{"conversation":{"topic":"t","x":{"id":"conv_3"}},"user":"u"}`), "only the conversation object's own id")
	assert.Equal(t, conversationOf("u"), name(`{"input":[{"previous_response_id":"resp_9","id":"conv_9"}],"user":"u"}`), "nested names are none")
	assert.Equal(t, conversationOf("k"), name(`{"previous_response_id":null,"prompt_cache_key":"k"}`), "null names nothing")
}

// TestUsageScannerReadsTheIDAnAnswerMakes: under wantNamed, the scanner
// keeps the conversation of an answer's resp_ or conv_ ID — a JSON
// answer's top-level id, a stream's response.id — fed whole or in pieces
// of any size: an ID the pieces cut is not read, and no piece of one is
// ever taken for it. Other IDs, nested ones, and a scanner that does not
// want them read nothing.
func TestUsageScannerReadsTheIDAnAnswerMakes(t *testing.T) {
	const usage = `"usage":{"input_tokens":10,"output_tokens":5}`
	for _, tt := range []struct {
		name, body string
		events     bool
		want       conversation
	}{
		{"response", `{"id":"resp_abc","object":"response","output":[{"id":"msg_1"}],` + usage + `}`, false, conversationOf("resp_abc")},
		{"conversation", `{"id":"conv_xyz","object":"conversation"}`, false, conversationOf("conv_xyz")},
		{"stream", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_s\",\"status\":\"in_progress\"}}\n\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_s\"," + usage + "}}\n\n", true, conversationOf("resp_s")},
		{"chat completion", `{"id":"chatcmpl-1","object":"chat.completion",` + usage + `}`, false, 0},
		{"nested", `{"object":"response","output":[{"id":"resp_inner"}],"data":{"id":"conv_inner"}}`, false, 0},
		{"not a string", `{"id":7,` + usage + `}`, false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for chunk := 1; chunk <= len(tt.body); chunk++ {
				var u usageScan
				u.usage.wantNamed = true
				for i := 0; i < len(tt.body); i += chunk {
					p := []byte(tt.body[i:min(i+chunk, len(tt.body))])
					if tt.events {
						u.sse.feed(p, &u.usage)
					} else {
						u.usage.feed(p)
					}
				}
				if chunk == len(tt.body) {
					assert.Equal(t, tt.want, u.usage.named, "whole")
				} else if u.usage.named != 0 {
					assert.Equal(t, tt.want, u.usage.named, "pieces of %d", chunk)
				}
			}
			var u usageScan
			if tt.events {
				u.sse.feed([]byte(tt.body), &u.usage)
			} else {
				u.usage.feed([]byte(tt.body))
			}
			assert.Zero(t, u.usage.named, "not wanted, not read")
		})
	}
}

// TestAffinityAFallbackDoesNotMoveWhatTheVendorKeeps: when the key that
// made a response cannot take the next turn for a moment (benched,
// disabled, at its cap), the turn goes to another key and is refused 400,
// as it must be; the response stays on the key that made it, so the retry
// once that key is back reaches it, where a conversation that only prefers
// a key would have moved for its idle time.
func TestAffinityAFallbackDoesNotMoveWhatTheVendorKeeps(t *testing.T) {
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "k1", ID: "a"}, {Secret: "k2", ID: "b"}}
	pool, err := New("openai", keys, WithClock(newTestClock().Now))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	status, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	require.Equal(t, http.StatusOK, status)
	maker := map[string]string{"k1": "a", "k2": "b"}[v.Served(0)[0]]

	ctx := context.Background()
	require.NoError(t, pool.Disable(ctx, maker, "operator"))
	next := fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id)
	status, _ = respond(t, client, url, "/v1/responses", next)
	require.Equal(t, http.StatusBadRequest, status, "the other organisation refuses it")
	require.NoError(t, pool.Enable(ctx, maker))

	status, _ = respond(t, client, url, "/v1/responses", next)
	assert.Equal(t, http.StatusOK, status, "the retry reaches the key that made %s again: served %v", id, v.Served(0))
}

// TestUsageScannerReadsAnIDAtTheStartOfAPiece: an ID whose opening quote ends one
// read and which comes whole in the next is still read (it is not one the
// pieces cut).
func TestUsageScannerReadsAnIDAtTheStartOfAPiece(t *testing.T) {
	var u usageScan
	u.usage.wantNamed = true
	u.usage.feed([]byte(`{"id":"`))
	u.usage.feed([]byte(`resp_abc","object":"response"}`))
	assert.Equal(t, conversationOf("resp_abc"), u.usage.named)
}

// TestAffinityPreviousResponseOutranksTheSession: previous_response_id is
// a hard constraint (only one organisation can answer it) and outranks a
// soft name such as X-Session-Id, which would send the chained turn to the
// organisation of the session's key, which refuses it.
func TestAffinityPreviousResponseOutranksTheSession(t *testing.T) {
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "k1", ID: "a"}, {Secret: "k2", ID: "b"}}
	pool, err := New("openai", keys, WithClock(newTestClock().Now))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	post := func(body, session string) int {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/responses", strings.NewReader(body))
		if session != "" {
			req.Header.Set("X-Session-Id", session)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, post(`{"model":"gpt-5","input":"warm"}`, "s")) // the session stays on k1
	_, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	require.Equal(t, "k2", v.Served(0)[1])
	status := post(fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id), "s")
	assert.Equal(t, http.StatusOK, status, "served %v", v.Served(0))
}

// TestAffinityStreamClosedAfterItsFirstEvent: a client that reads a stream's
// response.created and closes the body still leaves the ID on its key.
func TestAffinityStreamClosedAfterItsFirstEvent(t *testing.T) {
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "k1", ID: "a"}, {Secret: "k2", ID: "b"}, {Secret: "k3", ID: "c"}}
	pool, err := New("openai", keys, WithClock(newTestClock().Now))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/responses", strings.NewReader(`{"model":"gpt-5","input":"hello","stream":true}`))
	resp, err := client.Do(req)
	require.NoError(t, err)
	buf := make([]byte, 120)
	n, _ := io.ReadFull(resp.Body, buf)
	_ = resp.Body.Close()
	i := strings.Index(string(buf[:n]), `"id":"resp_`)
	require.Positive(t, i)
	id := string(buf[i+6 : i+6+len("resp_00000000")])
	for range 3 {
		status, _ := respond(t, client, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
		assert.Equal(t, http.StatusOK, status, "served %v", v.Served(0))
	}
}

// A request that names as its session the ID of a response another key
// made — by chance, or to move another's chain — moves no chain: the names
// requests give and the IDs the vendor makes are kept apart, in the pool
// and in a store replicas share.
func TestAffinitySessionNamedLikeAResponseMovesNoChain(t *testing.T) {
	clock := newTestClock()
	_, url := newResponsesVendor(t)
	store := &sharedAffinity{Store: NewMemoryStore(), keys: map[string]string{}}
	keys := []Key{{Secret: "k1", Limits: Limits{RPM: 1}}, {Secret: "k2", Limits: Limits{RPM: 1}}, {Secret: "k3", Limits: Limits{RPM: 1}}}
	replica := func() *http.Client {
		pool, err := New("openai", keys, WithClock(clock.Now), WithStore(store))
		require.NoError(t, err)
		t.Cleanup(func() { _ = pool.Close() })
		return &http.Client{Transport: pool.Transport(nil)}
	}
	client := replica()
	status, id := respond(t, client, url, "/v1/responses", `{"model":"gpt-5","input":"hello"}`)
	require.Equal(t, http.StatusOK, status)
	for range 2 { // k1, which made id, is full for the minute: the session moves, and its second request is told to the store
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-5","messages":[]}`))
		require.NoError(t, err)
		req.Header.Set("X-Session-Id", id)
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	clock.Advance(time.Minute + windowspec.ExactGuard)
	turn := fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id)
	status, _ = respond(t, replica(), url, "/v1/responses", turn)
	assert.Equal(t, http.StatusOK, status, "a replica that asks the store finds the key that made the ID")
	clock.Advance(time.Minute + windowspec.ExactGuard)
	status, _ = respond(t, client, url, "/v1/responses", turn)
	assert.Equal(t, http.StatusOK, status, "and so does the pool that served the session")
}

// A response made on a paid
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

// Requests that each name
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

// A pool
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
