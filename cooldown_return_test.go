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
