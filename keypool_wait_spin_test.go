package keypool

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// cpuTime returns the CPU time the process has used.
func cpuTime(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// waitingPool is a pool of two keys on a real clock whose requests wait up
// to max for a key, in front of v.
func waitingPool(t *testing.T, max time.Duration) (*Pool, *vendor, string) {
	t.Helper()
	v, srv := newVendor(t)
	p, err := New("test", []Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}, WaitForKey(max))
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p, v, srv.URL
}

func sendChat(t *testing.T, rt http.RoundTripper, url string) (*http.Response, error) {
	t.Helper()
	// A wait that never ends fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","messages":[]}`))
	require.NoError(t, err)
	resp, err := rt.RoundTrip(req)
	if err == nil {
		resp.Body.Close()
	}
	return resp, err
}

// A request every key has failed waits for the soonest bench to end, then
// tries the keys again: it sleeps meanwhile, and a request behind it in line
// is served as soon as a key is free.
func TestWaitAfterEveryKeyFailedSleeps(t *testing.T) {
	p, v, url := waitingPool(t, 5*time.Second)
	v.on("sk-a", rateLimited("1"))
	v.on("sk-b", rateLimited("1"))
	rt := p.Transport(nil)
	start, cpu := time.Now(), cpuTime(t)
	var second time.Duration
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(200 * time.Millisecond) // behind the first, in its line
		resp, err := sendChat(t, rt, url)
		assert.NoError(t, err)
		if err == nil {
			assert.Equal(t, http.StatusOK, resp.StatusCode)
		}
		second = time.Since(start)
	})
	resp, err := sendChat(t, rt, url)
	wall := time.Since(start)
	wg.Wait()
	used := cpuTime(t) - cpu
	t.Logf("served after %v with %v of CPU; the request behind it after %v", wall, used, second)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "served once a key is back")
	assert.True(t, wall >= time.Second && wall < 4*time.Second, "served when the 1 s bench ended: %v", wall)
	assert.Less(t, second, wall+time.Second, "the request behind it is served promptly: %v", second)
	assert.Less(t, used, wall/4, "the wait sleeps: %v of CPU in %v", used, wall)
}

// A request whose keys keep failing gives up at the pool's bound, having
// slept, not spun.
func TestWaitAfterEveryKeyFailedEndsAtItsBound(t *testing.T) {
	p, v, url := waitingPool(t, 2500*time.Millisecond)
	for range 10 {
		v.on("sk-a", rateLimited("1"))
		v.on("sk-b", rateLimited("1"))
	}
	start, cpu := time.Now(), cpuTime(t)
	_, err := sendChat(t, p.Transport(nil), url)
	wall, used := time.Since(start), cpuTime(t)-cpu
	t.Logf("gave up after %v with %v of CPU and %d tries", wall, used, len(v.received()))
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	assert.Less(t, wall, 3500*time.Millisecond, "no longer than WaitForKey's bound (2.5 s), give or take a busy machine: %v", wall)
	assert.Less(t, used, wall/4, "the wait sleeps: %v of CPU in %v", used, wall)
	assert.LessOrEqual(t, len(v.received()), 6, "at most one try of each key per bench that ends")
}

// Closing the pool releases every request waiting for a key at once.
func TestCloseReleasesWaiters(t *testing.T) {
	p, _, _ := waitingPool(t, time.Minute)
	for _, k := range p.keys {
		require.NoError(t, p.store.Bench(t.Context(), Bench{Provider: "test", KeyID: k.ID, AllModels: true,
			Kind: KindRate, Until: time.Now().Add(30 * time.Second)}))
	}
	errs := make(chan error, 3)
	for range 3 {
		go func() { errs <- p.Do(context.Background(), "m", func(context.Context, Key) error { return nil }) }()
	}
	time.Sleep(100 * time.Millisecond) // all three in line
	start := time.Now()
	require.NoError(t, p.Close())
	for range 3 {
		select {
		case err := <-errs:
			assert.ErrorContains(t, err, "pool is closed")
		case <-time.After(time.Second):
			t.Fatal("a waiter was not released by Close")
		}
	}
	assert.Less(t, time.Since(start), time.Second)
	err := p.Do(context.Background(), "m", func(context.Context, Key) error { return nil })
	assert.True(t, err != nil && !errors.Is(err, context.DeadlineExceeded), "a request after Close fails at once: %v", err)
}
