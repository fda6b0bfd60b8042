package keypool

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWaitForKeyServesInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b"}},
			WithLimits(Limits{RPM: 2}), WaitForKey(3*time.Minute))
		require.NoError(t, err)
		start := time.Now()
		var mu sync.Mutex
		var served []int
		var at []time.Duration
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				err := pool.Do(t.Context(), "m", func(context.Context, Key) error { return nil })
				assert.NoError(t, err, "request %d", i)
				mu.Lock()
				served = append(served, i)
				at = append(at, time.Since(start))
				mu.Unlock()
			})
			synctest.Wait() // request i is served or in line before i+1 arrives
		}
		wg.Wait()
		assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, served, "served in arrival order")
		for i, d := range at {
			wave := time.Duration(i/4) * time.Minute // four a minute: two keys of RPM 2
			assert.True(t, d >= wave && d <= wave+2*minuteSpan/30+time.Second, "request %d served after %v, want about %v", i, d, wave)
		}
	})
}

func TestWaitForKeyGivesUpWhenTheKeyIsTooFar(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b"}}, WaitForKey(time.Minute))
		require.NoError(t, err)
		for _, k := range pool.keys {
			require.NoError(t, pool.store.Bench(t.Context(), Bench{Provider: "test", KeyID: k.ID, AllModels: true,
				Kind: KindQuota, Until: time.Now().Add(time.Hour)}))
		}
		start := time.Now()
		err = pool.Do(t.Context(), "m", func(context.Context, Key) error { return nil })
		var na *NoAvailableKeyError
		require.ErrorAs(t, err, &na)
		assert.Zero(t, time.Since(start), "no wait for a key an hour away")
	})
}

func TestWaitForKeyHonoursTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b"}}, WaitForKey(time.Hour))
		require.NoError(t, err)
		for _, k := range pool.keys {
			require.NoError(t, pool.store.Bench(t.Context(), Bench{Provider: "test", KeyID: k.ID, AllModels: true,
				Kind: KindRate, Until: time.Now().Add(10 * time.Minute)}))
		}
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		start := time.Now()
		err = pool.Do(ctx, "m", func(context.Context, Key) error { return nil })
		require.Error(t, err)
		assert.Zero(t, time.Since(start), "the deadline comes before the key: fail at once")

		ctx, cancel = context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- pool.Do(ctx, "m", func(context.Context, Key) error { return nil }) }()
		time.Sleep(time.Minute)
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
		assert.Equal(t, time.Minute, time.Since(start))
	})
}

func TestWaitForKeyThroughTheTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sent []time.Duration
		start := time.Now()
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent = append(sent, time.Since(start))
			return okResponse(r), nil
		})
		pool, err := New("test", []Key{{Secret: "sk-a"}}, WithLimits(Limits{RPM: 1}), WaitForKey(2*time.Minute))
		require.NoError(t, err)
		rt := pool.Transport(base)
		for range 2 {
			req, _ := http.NewRequest(http.MethodGet, "http://vendor.test/v1beta/models/gemini:generateContent", nil)
			resp, err := rt.RoundTrip(req)
			require.NoError(t, err)
			resp.Body.Close()
		}
		require.Len(t, sent, 2)
		assert.True(t, sent[1] >= time.Minute && sent[1] <= time.Minute+3*time.Second, "the second waited for the minute: %v", sent[1])
	})
}
