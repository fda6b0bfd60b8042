package keypool

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"weak"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTakeOverCountsWhatThePreviousPoolHolds: a pool that takes over from
// one still finishing its requests counts them against its in-flight caps —
// a key's, and an account's by its name — so that no key ever holds more
// than its cap across both; a place the old pool gives back wakes the new
// pool's line at once; a key whose secret changed under its ID starts
// afresh.
func TestTakeOverCountsWhatThePreviousPoolHolds(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []Key
		opts []Option
	}{
		{"key cap", []Key{{Secret: "sk-a", ID: "a", Limits: Limits{InFlight: 1}}, {Secret: "sk-b", ID: "b", Limits: Limits{InFlight: 1}}}, nil},
		{"account cap", []Key{{Secret: "sk-a", ID: "a", Account: "team"}, {Secret: "sk-b", ID: "b", Account: "team"}, {Secret: "sk-c", ID: "c", Account: "team"}},
			[]Option{WithAccountLimits("team", Limits{InFlight: 2})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				v := &flightVendor{now: map[string]int{}, most: map[string]int{}}
				send := func(p *Pool) (*http.Response, error) {
					req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat", strings.NewReader(`{"model":"m"}`))
					return p.Transport(v).RoundTrip(req)
				}
				prev, err := New("test", tc.keys, tc.opts...)
				require.NoError(t, err)
				held, err := send(prev) // prev's request, under way through the reload
				require.NoError(t, err)
				next, err := New("test", tc.keys, append(tc.opts, TakeOver(prev), WaitForKey(time.Minute))...)
				require.NoError(t, err)
				defer next.Close()
				open, err := send(next) // the one place prev's request leaves
				require.NoError(t, err)
				start := time.Now()
				done := make(chan time.Duration)
				go func() {
					resp, err := send(next) // waits in line: every place is taken
					if assert.NoError(t, err) {
						_ = resp.Body.Close()
					}
					done <- time.Since(start)
				}()
				time.Sleep(100 * time.Millisecond)
				synctest.Wait()
				_ = held.Body.Close() // prev gives its place back
				waited := <-done
				assert.GreaterOrEqual(t, waited, 100*time.Millisecond, "prev's request held a place of the new pool's cap")
				assert.Less(t, waited, 100*time.Millisecond+flightRetry/2, "woken by prev's place, not by the next try")
				_ = open.Body.Close()
				if tc.name == "key cap" {
					for key, n := range v.most {
						assert.LessOrEqual(t, n, 1, "key %s held %d at once, across both pools", key, n)
					}
				}
				require.NoError(t, prev.Close())
			})
		})
	}
	t.Run("secret changed", func(t *testing.T) {
		v := &flightVendor{now: map[string]int{}, most: map[string]int{}}
		prev, err := New("test", []Key{{Secret: "sk-old", ID: "a", Limits: Limits{InFlight: 1}}})
		require.NoError(t, err)
		req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat", strings.NewReader(`{"model":"m"}`))
		held, err := prev.Transport(v).RoundTrip(req)
		require.NoError(t, err)
		defer held.Body.Close()
		next, err := New("test", []Key{{Secret: "sk-new", ID: "a", Limits: Limits{InFlight: 1}}}, TakeOver(prev))
		require.NoError(t, err)
		req, _ = http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat", strings.NewReader(`{"model":"m"}`))
		resp, err := next.Transport(v).RoundTrip(req)
		require.NoError(t, err, "another secret is another key: the old one's request is not its")
		_ = resp.Body.Close()
	})
}

// TestTakeOverKeepsConversations: the conversations the old pool kept stay
// on the keys of the same IDs in the new one, whatever order its keys come
// in; one whose key is gone goes where the round-robin sends it.
func TestTakeOverKeepsConversations(t *testing.T) {
	fixtureOf := fixturesOverOneVendor(t)
	prev := fixtureOf(threeKeys())
	on := map[string]string{}
	for _, c := range []string{"c1", "c2", "c3"} {
		on[c] = converse(t, prev, `"prompt_cache_key":"`+c+`"`)
	}
	require.Len(t, map[string]bool{on["c1"]: true, on["c2"]: true, on["c3"]: true}, 3, "one conversation on each key")

	keys := threeKeys()
	slices.Reverse(keys)
	gone := keys[0].Secret
	keys = keys[1:] // one key is gone from the new configuration
	next := fixtureOf(keys, TakeOver(prev.pool))
	for c, key := range on {
		if key != gone {
			assert.Equal(t, key, converse(t, next, `"prompt_cache_key":"`+c+`"`), "%s stays on its key", c)
		}
	}
	var held int
	for _, ks := range next.pool.Stats() {
		held += ks.Conversations
	}
	assert.Equal(t, 2, held, "the new pool holds the conversations of the keys it kept")
}

// TestTakeOverRefuses: a pool of another provider, or a closed one, cannot
// be taken over from; the error says which.
func TestTakeOverRefuses(t *testing.T) {
	other, err := New("anthropic", threeKeys())
	require.NoError(t, err)
	_, err = New("openai", threeKeys(), TakeOver(other))
	assert.EqualError(t, err, `keypool: openai: TakeOver: a pool of "openai" cannot take over from one of "anthropic"`)
	same, err := New("openai", threeKeys())
	require.NoError(t, err)
	require.NoError(t, same.Close())
	_, err = New("openai", threeKeys(), TakeOver(same))
	assert.EqualError(t, err, "keypool: openai: TakeOver: the pool taken over from is closed")
	_, err = New("openai", threeKeys(), TakeOver(nil))
	assert.NoError(t, err, "nil is none")
}

// TestTakeOverLetsThePreviousPoolGo: a pool that took over from another
// does not keep it alive once it is closed and dropped: were it held, every
// reload of the proxy would keep every earlier pool (and, through its
// hooks, every earlier server) for the life of the process.
func TestTakeOverLetsThePreviousPoolGo(t *testing.T) {
	prev, err := New("openai", threeKeys(), WithAffinityMemory(1000, time.Hour))
	require.NoError(t, err)
	gone := weak.Make(prev)
	next, err := New("openai", threeKeys(), TakeOver(prev))
	require.NoError(t, err)
	require.NoError(t, prev.Close())
	prev = nil
	for range 5 {
		runtime.GC()
	}
	assert.True(t, gone.Value() == nil, "the new pool holds the old one alive (config.prev)")
	runtime.KeepAlive(next)
}

// TestTakeOverHearsWhatTheOldPoolsAnswersMake: a Responses request
// under way on the old pool at a reload makes its ID after the new pool was
// built; the client's next turn comes to the new pool, which must send it
// to the key that made that ID.
func TestTakeOverHearsWhatTheOldPoolsAnswersMake(t *testing.T) {
	v, url := newResponsesVendor(t)
	keys := []Key{{Secret: "k1", ID: "a"}, {Secret: "k2", ID: "b"}, {Secret: "k3", ID: "c"}}
	clock := newTestClock()
	prev, err := New("openai", keys, WithClock(clock.Now))
	require.NoError(t, err)
	pc := &http.Client{Transport: prev.Transport(nil)}
	respond(t, pc, url, "/v1/responses", `{"model":"gpt-5","input":"other"}`) // moves prev's cursor past k1

	req, err := http.NewRequest(http.MethodPost, url+"/v1/responses", strings.NewReader(`{"model":"gpt-5","input":"hello","stream":true}`))
	require.NoError(t, err)
	resp, err := pc.Do(req) // under way through the reload: headers in, body not yet read
	require.NoError(t, err)

	next, err := New("openai", keys, WithClock(clock.Now), TakeOver(prev))
	require.NoError(t, err)
	defer next.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	_ = prev.Close()
	i := strings.Index(string(body), `"id":"resp_`)
	require.Positive(t, i)
	id := string(body[i+6 : i+6+len("resp_00000000")])

	nc := &http.Client{Transport: next.Transport(nil)}
	status, _ := respond(t, nc, url, "/v1/responses", fmt.Sprintf(`{"model":"gpt-5","input":"go on","previous_response_id":%q}`, id))
	assert.Equal(t, http.StatusOK, status, "the next turn, on the new pool, reaches the key that made %s: served %v", id, v.Served(0))
}

// TestTakeOverWakesTheOldPoolsLineToo: a request waiting in the old
// pool's line (it came in before the reload) for a place the new pool's
// request holds is woken when that place is given back, as the new pool's
// line is woken by the old pool's places; not a second later.
func TestTakeOverWakesTheOldPoolsLineToo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := &flightVendor{now: map[string]int{}, most: map[string]int{}}
		send := func(p *Pool) (*http.Response, error) {
			req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat", strings.NewReader(`{"model":"m"}`))
			return p.Transport(v).RoundTrip(req)
		}
		keys := []Key{{Secret: "sk-a", ID: "a", Limits: Limits{InFlight: 1}}}
		prev, err := New("test", keys, WaitForKey(time.Minute))
		require.NoError(t, err)
		next, err := New("test", keys, TakeOver(prev), WaitForKey(time.Minute))
		require.NoError(t, err)
		held, err := send(next)
		require.NoError(t, err)
		start := time.Now()
		done := make(chan time.Duration)
		go func() {
			resp, err := send(prev) // a failover or a late request of the old configuration
			if assert.NoError(t, err) {
				_ = resp.Body.Close()
			}
			done <- time.Since(start)
		}()
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		_ = held.Body.Close() // the new pool gives its place back
		waited := <-done
		assert.Less(t, waited, 100*time.Millisecond+flightRetry/2, "woken by the new pool's place, not by the next try")
		_ = prev.Close()
		_ = next.Close()
	})
}

// TestTakeOverARenamedKeyKeepsItsCap: the vendor caps a secret, whatever
// the configuration calls it; a reload that renames a key's ID leaves the
// old pool's requests uncounted and the secret holds twice its cap.
func TestTakeOverARenamedKeyKeepsItsCap(t *testing.T) {
	v := &flightVendor{now: map[string]int{}, most: map[string]int{}}
	send := func(p *Pool) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/v1/chat", strings.NewReader(`{"model":"m"}`))
		resp, err := p.Transport(v).RoundTrip(req)
		if err != nil {
			return nil
		}
		return resp
	}
	prev, err := New("test", []Key{{Secret: "sk-a", ID: "a", Limits: Limits{InFlight: 1}}})
	require.NoError(t, err)
	held := send(prev)
	require.NotNil(t, held)
	defer held.Body.Close()
	next, err := New("test", []Key{{Secret: "sk-a", ID: "primary", Limits: Limits{InFlight: 1}}}, TakeOver(prev))
	require.NoError(t, err)
	if resp := send(next); resp != nil {
		defer resp.Body.Close()
	}
	assert.LessOrEqual(t, v.most["sk-a"], 1, "the secret held %d at once across a reload", v.most["sk-a"])
}

// TestTakeOverKeepsConversationsOfARenamedKey: a key whose ID the new
// configuration renames keeps its conversations, which are its secret's
// organisation's; a key renewed in place, another secret under its ID,
// keeps them too.
func TestTakeOverKeepsConversationsOfARenamedKey(t *testing.T) {
	fixtureOf := fixturesOverOneVendor(t)
	prev := fixtureOf([]Key{{Secret: "sk-1", ID: "one"}, {Secret: "sk-2", ID: "two"}, {Secret: "sk-3", ID: "three"}})
	on := map[string]string{}
	for _, c := range []string{"c1", "c2", "c3"} {
		on[c] = converse(t, prev, `"prompt_cache_key":"`+c+`"`)
	}
	next := fixtureOf([]Key{{Secret: "sk-3", ID: "primary"}, {Secret: "sk-2b", ID: "two"}, {Secret: "sk-1", ID: "spare"}}, TakeOver(prev.pool))
	renewed := map[string]string{"sk-1": "sk-1", "sk-2": "sk-2b", "sk-3": "sk-3"}
	for c, key := range on {
		assert.Equal(t, renewed[key], converse(t, next, `"prompt_cache_key":"`+c+`"`), "%s stays with its key", c)
	}
}

// fixturesOverOneVendor returns a maker of fixtures over one vendor and
// one clock: a pool of the keys given, with opts, and its client.
func fixturesOverOneVendor(t *testing.T) func(keys []Key, opts ...Option) *fixture {
	clock := newTestClock()
	v, srv := newVendor(t)
	return func(keys []Key, opts ...Option) *fixture {
		pool, err := New("x", keys, append([]Option{WithClock(clock.Now)}, opts...)...)
		require.NoError(t, err)
		return &fixture{clock: clock, vendor: v, url: srv.URL, pool: pool, client: &http.Client{Transport: pool.Transport(nil)}}
	}
}
