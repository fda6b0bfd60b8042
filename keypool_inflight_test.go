package keypool

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flightVendor answers in memory, and
// counts the requests each key holds at once: from its send until its
// answer's body is closed.
type flightVendor struct {
	mu   sync.Mutex // guards now and most
	now  map[string]int
	most map[string]int
}

func (v *flightVendor) RoundTrip(r *http.Request) (*http.Response, error) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	v.mu.Lock()
	v.now[key]++
	v.most[key] = max(v.most[key], v.now[key])
	v.mu.Unlock()
	body := &endBody{Reader: strings.NewReader(`{"ok":true}`), end: func() {
		v.mu.Lock()
		v.now[key]--
		v.mu.Unlock()
	}}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: body, Request: r}, nil
}

// endBody calls end once, at its Close.
type endBody struct {
	io.Reader
	once sync.Once
	end  func()
}

func (b *endBody) Close() error { b.once.Do(b.end); return nil }

// TestInFlightCapsWhatAKeyHolds holds Limits.InFlight: with a cap of 2 a
// key never holds more than 2 requests at once, from the take until the
// answer's body is read or closed; a burst of 24 on 4 keys waits in line and
// every request is served; an account's cap counts its keys together.
func TestInFlightCapsWhatAKeyHolds(t *testing.T) {
	cases := []struct {
		name    string
		keys    []Key
		opts    []Option
		perKey  int // the most any key may hold
		overall int // the most all keys together may hold; 0: any
	}{
		{"key cap from WithLimits", fourKeys(""), []Option{WithLimits(Limits{InFlight: 2})}, 2, 8},
		{"key cap of its own", func() []Key {
			k := fourKeys("")
			for i := range k {
				k[i].Limits.InFlight = 2
			}
			return k
		}(), nil, 2, 8},
		{"account cap", fourKeys("team"), []Option{WithAccountLimits("team", Limits{InFlight: 3})}, 3, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				v := &flightVendor{now: map[string]int{}, most: map[string]int{}}
				p, err := New("test", tc.keys, append(tc.opts, WaitForKey(time.Minute))...)
				require.NoError(t, err)
				defer p.Close()
				client := &http.Client{Transport: p.Transport(v)}
				var wg sync.WaitGroup
				var mu sync.Mutex
				var served, most, now int
				start := time.Now() // the bubble's clock
				for i := range 24 {
					wg.Go(func() {
						resp, err := client.Post("http://vendor.test/v1/chat", "application/json", strings.NewReader(`{"model":"m"}`))
						if !assert.NoError(t, err) {
							return
						}
						mu.Lock()
						now++
						most = max(most, now)
						mu.Unlock()
						time.Sleep(time.Duration(10+i) * time.Millisecond) // the caller reads its answer
						if i%2 == 0 {
							_, _ = io.ReadAll(resp.Body) // read to its end: the place is given back then
						}
						mu.Lock()
						now--
						if resp.StatusCode == http.StatusOK {
							served++
						}
						mu.Unlock()
						_ = resp.Body.Close()
					})
				}
				wg.Wait()
				// A place given back wakes the line at once, not at the
				// next try (flightRetry).
				assert.Less(t, time.Since(start), flightRetry, "the burst took %v", time.Since(start))
				assert.Equal(t, 24, served, "every request of the burst is served within its wait")
				for key, n := range v.most {
					assert.LessOrEqual(t, n, tc.perKey, "key %s held %d at once", key, n)
				}
				if tc.overall != 0 {
					assert.LessOrEqual(t, most, tc.overall, "the keys held %d at once", most)
				}
				assert.GreaterOrEqual(t, most, min(tc.perKey, 2), "requests ran side by side")
			})
		})
	}
}

func fourKeys(account string) []Key {
	return []Key{{Secret: "sk-a", ID: "a", Account: account}, {Secret: "sk-b", ID: "b", Account: account},
		{Secret: "sk-c", ID: "c", Account: account}, {Secret: "sk-d", ID: "d", Account: account}}
}

// TestInFlightWithoutWaitFailsOver holds a cap without WaitForKey: a
// request that finds every key full gets a NoAvailableKeyError at once,
// and one whose key failed over gives its place back.
func TestInFlightWithoutWaitFailsOver(t *testing.T) {
	v := &flightVendor{now: map[string]int{}, most: map[string]int{}}
	p, err := New("test", fourKeys("")[:2], WithLimits(Limits{InFlight: 1}))
	require.NoError(t, err)
	defer p.Close()
	client := &http.Client{Transport: p.Transport(v)}
	var open []*http.Response
	for range 2 {
		resp, err := client.Get("http://vendor.test/")
		require.NoError(t, err)
		open = append(open, resp)
	}
	_, err = client.Get("http://vendor.test/")
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na, "both keys hold their one request")
	require.NoError(t, open[0].Body.Close())
	resp, err := client.Get("http://vendor.test/")
	require.NoError(t, err, "a closed body gave its place back")
	_ = resp.Body.Close()
	_ = open[1].Body.Close()
}

func TestInFlightNegativeRefused(t *testing.T) {
	_, err := New("test", []Key{{Secret: "sk-a", Limits: Limits{InFlight: -1}}})
	require.ErrorContains(t, err, "negative limit")
}

// TestInFlightOnlyWhereItCounts: a cap of requests at once is a key's or
// an account's; given for a model or in a key's cap of windows, where
// nothing would count it, it is refused by name.
func TestInFlightOnlyWhereItCounts(t *testing.T) {
	_, err := New("x", threeKeys(), WithModelLimits(map[string]Limits{"m": {InFlight: 2}}))
	require.ErrorContains(t, err, `WithModelLimits: model "m": InFlight bounds a key or an account, not a model`)
	_, err = New("x", threeKeys(), WithKeyCap(Limits{RPD: 10, InFlight: 2}))
	require.ErrorContains(t, err, "WithKeyCap: InFlight bounds a key in WithLimits or Key.Limits")
}

// A function of Pool.Do, or a hook of the transport, that panics gives its
// key's place back, and the transport closes the answer's body: with keys
// of InFlight 1, every key serves a request held open afterwards.
func TestPanicGivesBackTheKeysPlace(t *testing.T) {
	mustPanic := func(f func()) {
		t.Helper()
		defer func() { require.NotNil(t, recover(), "the panic goes on to the caller") }()
		f()
	}
	t.Run("Do", func(t *testing.T) {
		p, err := New("test", fourKeys("")[:1], WithLimits(Limits{InFlight: 1}))
		require.NoError(t, err)
		defer p.Close()
		mustPanic(func() { _ = p.Do(t.Context(), "m", func(context.Context, Key) error { panic("the caller's bug") }) })
		require.NoError(t, p.Do(t.Context(), "m", func(context.Context, Key) error { return nil }), "the key's place is back")
	})
	// OnAttempt panics at the first answer; OnEvict at the bench of the
	// first, a throttle of 30 s (a pool of one key benches nothing).
	for hook, keys := range map[string]int{"OnAttempt": 1, "OnEvict": 2} {
		t.Run(hook, func(t *testing.T) {
			v := &flightVendor{now: map[string]int{}, most: map[string]int{}}
			clock := newTestClock()
			var once, throttled sync.Once
			boom := func() { once.Do(func() { panic("the hook's bug") }) }
			p, err := New("test", fourKeys("")[:keys], WithClock(clock.Now), WithLimits(Limits{InFlight: 1}),
				OnAttempt(func(context.Context, Attempt) {
					if hook == "OnAttempt" {
						boom()
					}
				}),
				OnEvict(func(Eviction) { boom() }))
			require.NoError(t, err)
			defer p.Close()
			client := &http.Client{Transport: p.Transport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := v.RoundTrip(r)
				if hook == "OnEvict" {
					throttled.Do(func() {
						resp.StatusCode = http.StatusTooManyRequests
						resp.Header.Set("Retry-After", "30")
					})
				}
				return resp, err
			}))}
			mustPanic(func() { _, _ = client.Get("http://vendor.test/") })
			v.mu.Lock()
			held := v.now["sk-a"] + v.now["sk-b"]
			v.mu.Unlock()
			assert.Zero(t, held, "the answer's body was closed")
			clock.Advance(31 * time.Second)
			for i := range keys {
				resp, err := client.Get("http://vendor.test/")
				require.NoError(t, err, "request %d: every key's place is back", i)
				defer resp.Body.Close()
			}
		})
	}
}
