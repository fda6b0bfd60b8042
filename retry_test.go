package keypool

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// retryClient is a go-retryablehttp client over pool, with the keypool
// retry policies.
func retryClient(pool *Pool, maxWait time.Duration) *retryablehttp.Client {
	retry := Retry{MinWait: 10 * time.Millisecond, MaxWait: maxWait}
	c := retryablehttp.NewClient()
	c.Logger = nil
	c.HTTPClient.Transport = pool.Transport(nil)
	c.RetryMax = 4
	c.CheckRetry, c.Backoff = retry.CheckRetry, retry.Backoff
	return c
}

const retryBody = `{"model":"m","messages":[{"role":"user","content":"replay me"}]}`

func retryPost(t *testing.T, c *retryablehttp.Client, url string) (*http.Response, error) {
	t.Helper()
	req, err := retryablehttp.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(retryBody))
	require.NoError(t, err)
	return c.Do(req)
}

func TestRetryWaitsForTheSoonestKey(t *testing.T) {
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b"}})
	require.NoError(t, err)
	v.on("sk-a", rateLimited("1"))
	v.on("sk-b", rateLimited("1"))
	start := time.Now()
	resp, err := retryPost(t, retryClient(pool, 5*time.Second), srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	waited := time.Since(start)
	assert.True(t, waited >= 900*time.Millisecond && waited < 2500*time.Millisecond, "waited %v for a key benched 1 s", waited)
	got := v.received()
	assert.Len(t, got, 3, "each key once, then one retry: no storm")
	for _, r := range got {
		assert.Equal(t, retryBody, r.body, "the body is replayed intact")
	}
}

func TestRetryStopsWhenNoKeyReturnsInTime(t *testing.T) {
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-a"}, {Secret: "sk-b"}})
	require.NoError(t, err)
	v.on("sk-a", rateLimited("3600"))
	v.on("sk-b", rateLimited("7200"))
	start := time.Now()
	_, err = retryPost(t, retryClient(pool, 5*time.Second), srv.URL)
	var na *NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	assert.WithinDuration(t, time.Now().Add(time.Hour), na.RetryAt, 5*time.Second, "the error says when")
	assert.Less(t, time.Since(start), time.Second, "no sleep into an hour-long bench")
	assert.Len(t, v.received(), 2)
}

func TestRetryNeverIntoALongWindow(t *testing.T) {
	reset := time.Now().Add(72 * time.Hour).Truncate(time.Second)
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-only"}})
	require.NoError(t, err)
	v.on("sk-only", answer{status: http.StatusTooManyRequests, header: map[string]string{
		"Retry-After":                                      "60",
		"Anthropic-Ratelimit-Unified-Status":               "rejected",
		"Anthropic-Ratelimit-Unified-7d-Utilization":       "1.02",
		"Anthropic-Ratelimit-Unified-7d-Reset":             strconv.FormatInt(reset.Unix(), 10),
		"Anthropic-Ratelimit-Unified-Representative-Claim": "seven_day",
	}})
	_, err = retryPost(t, retryClient(pool, 30*time.Second), srv.URL)
	var pe *ProviderError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, KindQuota, pe.Kind)
	assert.Equal(t, WindowWeekly, pe.Window)
	assert.True(t, pe.ResetAt.Equal(reset), "ResetAt = %v, want %v", pe.ResetAt, reset)
	assert.Len(t, v.received(), 1, "a weekly window is not retried")
}

func TestRetryShortThrottleSleepsOnRetryAfter(t *testing.T) {
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-only"}})
	require.NoError(t, err)
	v.on("sk-only", answer{status: 429, header: map[string]string{"Retry-After-Ms": "300"}},
		answer{status: 503}, answer{status: 200, body: "ok"})
	start := time.Now()
	resp, err := retryPost(t, retryClient(pool, 5*time.Second), srv.URL)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "ok", string(b))
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "slept on retry-after-ms")
	assert.Len(t, v.received(), 3)
}

func TestRetryAuthIsNotRetried(t *testing.T) {
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-only"}})
	require.NoError(t, err)
	v.on("sk-only", answer{status: 401})
	resp, err := retryPost(t, retryClient(pool, time.Second), srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Len(t, v.received(), 1)
}

// A 403 whose prose alone speaks of a rate limit may be quoting the
// request: retrying it would only get it again.
func TestRetryQuotedIsNotRetried(t *testing.T) {
	v, srv := newVendor(t)
	pool, err := New("test", []Key{{Secret: "sk-only"}})
	require.NoError(t, err)
	v.on("sk-only", answer{status: 403, body: `{"error":{"message":"model 'rate limit' is not allowed"}}`})
	resp, err := retryPost(t, retryClient(pool, time.Second), srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Len(t, v.received(), 1)
}

func TestRetryBackoff(t *testing.T) {
	r := Retry{MinWait: time.Second, MaxWait: 30 * time.Second}
	resp := func(h map[string]string) *http.Response {
		hdr := http.Header{}
		for k, v := range h {
			hdr.Set(k, v)
		}
		return &http.Response{StatusCode: 429, Header: hdr}
	}
	tests := []struct {
		name    string
		attempt int
		resp    *http.Response
		want    time.Duration
	}{
		{"no answer", 3, nil, time.Second},
		{"Retry-After", 0, resp(map[string]string{"Retry-After": "7"}), 7 * time.Second},
		{"retry-after-ms", 0, resp(map[string]string{"Retry-After-Ms": "2500"}), 2500 * time.Millisecond},
		{"capped", 0, resp(map[string]string{"Retry-After": "484289"}), 30 * time.Second},
		{"below min", 0, resp(map[string]string{"Retry-After": "0"}), time.Second},
		{"exponential", 3, resp(nil), 8 * time.Second},
		{"exponential capped", 10, resp(nil), 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The client's own waits (retryablehttp's defaults here) are
			// not used: the waits are set once, in Retry.
			got := r.Backoff(time.Second, 30*time.Minute, tt.attempt, tt.resp)
			assert.InDelta(t, float64(tt.want), float64(got), float64(50*time.Millisecond), "Backoff = %v, want %v", got, tt.want)
		})
	}
	assert.Equal(t, time.Second, Retry{}.Backoff(0, 0, 0, nil), "a zero MinWait is a second")
	assert.Equal(t, 30*time.Second, Retry{}.Backoff(0, 0, 20, resp(nil)), "a zero MaxWait is 30 seconds")
}

func TestRetryCheckRetryStopsOnContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	retry, err := Retry{MaxWait: time.Second}.CheckRetry(ctx, nil, errors.New("x"))
	assert.False(t, retry)
	assert.ErrorIs(t, err, context.Canceled)
}
