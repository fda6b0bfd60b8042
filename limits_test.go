package keypool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chat is the body of a chat request for model with maxTokens.
func chat(model string, maxTokens int) string {
	return fmt.Sprintf(`{"model":%q,"max_tokens":%d,"messages":[{"role":"user","content":"hi"}]}`, model, maxTokens)
}

// post sends a chat request for model with maxTokens through client.
func post(client *http.Client, url, model string, maxTokens int) (int, error) {
	body := chat(model, maxTokens)
	resp, err := client.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestLimitsRefuseBeforeSending(t *testing.T) {
	clock := newTestClock()
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b"}}, WithClock(clock.Now), WithLimits(Limits{RPM: 2}))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	for range 4 {
		status, err := post(client, srv.URL, "m", 10)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
	}
	_, err = post(client, srv.URL, "m", 10)
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	assert.Len(t, v.keys(), 4, "the vendor never saw the refused request")
	wait := na.RetryAt.Sub(clock.Now())
	assert.True(t, wait > time.Minute-2*time.Second && wait <= time.Minute+2*time.Second, "RetryAt is a minute away, not %v", wait)

	// A call one nanosecond before RetryAt is refused; a call at RetryAt goes through.
	clock.Advance(wait - time.Nanosecond)
	_, err = post(client, srv.URL, "m", 10)
	require.ErrorAs(t, err, &na)
	clock.Advance(time.Nanosecond)
	status, err := post(client, srv.URL, "m", 10)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, status)
}

func TestLimitsPerModelPerKeyAndCap(t *testing.T) {
	clock := newTestClock()
	_, srv := newVendor(t)
	pool, err := New("test",
		[]Key{{Secret: "sk-a", ID: "a", Limits: Limits{RPM: 3}}, {Secret: "sk-b", ID: "b"}},
		WithClock(clock.Now),
		WithLimits(Limits{RPM: 10}),
		WithModelLimits(map[string]Limits{"small": {RPM: 1}}),
		WithKeyCap(Limits{RPD: 6}),
	)
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	send := func(model string) error { _, err := post(client, srv.URL, model, 1); return err }

	// "small" allows one request a minute per key, whatever the pool says;
	// key a's own RPM 3 beats the model's 1.
	require.NoError(t, send("small"))
	require.NoError(t, send("small"))
	require.NoError(t, send("small"))
	require.NoError(t, send("small"))
	assert.Error(t, send("small"), "a: 3 of small, b: 1 of small")

	// The cap counts every model: a has used 3 of its 6 a day, b 1.
	for range 8 {
		require.NoError(t, send("big"))
	}
	err = send("other")
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na, "both keys at their daily cap across models")
	st := pool.Stats()
	assert.Equal(t, int64(6), st[0].Cap.DayRequests)
	assert.Equal(t, int64(6), st[1].Cap.DayRequests)
	assert.Equal(t, int64(6), st[0].CapLimits.RPD, "Stats gives the cap's limits beside its use")
	assert.Equal(t, Limits{RPM: 3}, st[0].Models[indexOfModel(st[0].Models, "small")].Limits)
	assert.Equal(t, Limits{RPM: 1}, st[1].Models[indexOfModel(st[1].Models, "small")].Limits)
}

func indexOfModel(ms []ModelStats, model string) int {
	for i, m := range ms {
		if m.Model == model {
			return i
		}
	}
	return -1
}

func TestLimitsPaidKeyWhenFreeKeysAreFull(t *testing.T) {
	clock := newTestClock()
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-paid", Paid: true}, {Secret: "sk-free"}},
		WithClock(clock.Now), WithLimits(Limits{RPM: 2}))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	for range 4 {
		_, err := post(client, srv.URL, "m", 1)
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"sk-free", "sk-free", "sk-paid", "sk-paid"}, v.keys())
}

func TestLimitsTokensEstimatedAndSettled(t *testing.T) {
	clock := newTestClock()
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b", Paid: true}}, WithClock(clock.Now),
		WithLimits(Limits{TPM: 1000}))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	// Each request reserves about 400 tokens of output; the answers say they
	// used 50 tokens, which frees room for more on the free key.
	v.on("sk-a", answer{status: 200, header: map[string]string{"Content-Type": "application/json"},
		body: `{"id":"x","usage":{"prompt_tokens":20,"completion_tokens":30,"total_tokens":50}}`})
	for range 2 {
		status, err := post(client, srv.URL, "m", 400)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status)
	}
	// The first settled at 50 tokens; the second (no usage in its answer)
	// keeps its estimate of ~401. A third of ~401 still fits in 1000.
	status, err := post(client, srv.URL, "m", 400)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status)
	assert.Equal(t, []string{"sk-a", "sk-a", "sk-a"}, v.keys())
	st := pool.Stats()[0]
	require.Len(t, st.Models, 1)
	assert.Equal(t, int64(3), st.Models[0].Usage.MinuteRequests)
	assert.Equal(t, 50+2*DefaultEstimate(scanRequest([]byte(chat("m", 400)), nil)), st.Models[0].Usage.MinuteTokens)
}

func TestLimitsTakeIsAtomicUnderConcurrency(t *testing.T) {
	clock := newTestClock()
	var served atomic.Int64
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		served.Add(1)
		return okResponse(r), nil
	})
	pool, err := New("test", threeKeys(), WithClock(clock.Now), WithLimits(Limits{RPM: 17, TPM: 10_000}))
	require.NoError(t, err)
	rt := pool.Transport(base)
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 200 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, "http://vendor.test/", strings.NewReader(`{"model":"m","max_tokens":10}`))
			resp, err := rt.RoundTrip(req)
			var na *NoAvailableKeyError
			switch {
			case errors.As(err, &na):
				refused.Add(1)
			case err != nil:
				t.Error(err)
			default:
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(3*17), served.Load(), "exactly the limit of every key")
	assert.Equal(t, int64(200-3*17), refused.Load())
}

func TestLimitsCalendarDay(t *testing.T) {
	pacific, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	clock := &testClock{t: time.Date(2026, 3, 5, 23, 0, 0, 0, pacific)}
	pool, err := New("test", []Key{{Secret: "sk-a"}}, WithClock(clock.Now),
		WithLimits(Limits{RPD: 2}), WithCalendarDay(0, pacific))
	require.NoError(t, err)
	ok := func() error {
		return pool.Do(t.Context(), "m", func(context.Context, Key) error { return nil })
	}
	require.NoError(t, ok())
	require.NoError(t, ok())
	err = ok()
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	assert.True(t, na.RetryAt.Equal(time.Date(2026, 3, 6, 0, 0, 0, 0, pacific)), "RetryAt = %v, want midnight Pacific", na.RetryAt)
	clock.Advance(time.Hour)
	assert.NoError(t, ok(), "a new day at midnight Pacific")
}
