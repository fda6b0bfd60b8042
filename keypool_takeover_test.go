package keypool

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

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
	clock := newTestClock()
	v, srv := newVendor(t)
	fixtureOf := func(keys []Key, opts ...Option) *fixture {
		pool, err := New("x", keys, append([]Option{WithClock(clock.Now)}, opts...)...)
		require.NoError(t, err)
		return &fixture{clock: clock, vendor: v, url: srv.URL, pool: pool, client: &http.Client{Transport: pool.Transport(nil)}}
	}
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
