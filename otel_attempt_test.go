package keypool

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ctxMark struct{}

// attempts collects what OnAttempt hears, with the mark of its context.
type attempts struct {
	mu   sync.Mutex
	list []Attempt
	mark []any
}

func (a *attempts) add(ctx context.Context, at Attempt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.list = append(a.list, at)
	a.mark = append(a.mark, ctx.Value(ctxMark{}))
}

// TestOnAttemptHearsEachAttempt: a request that fails over is two attempts,
// each with its key, status, kind, bench and place, on the request's
// context; an attempt with no answer says it failed; Pool.Do's attempts
// are heard too.
func TestOnAttemptHearsEachAttempt(t *testing.T) {
	var got attempts
	f := newFixture(t, OnAttempt(got.add))
	f.vendor.on("sk-a", rateLimited("30"))
	ctx := context.WithValue(t.Context(), ctxMark{}, "request-1")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url+"/v1/chat/completions", nil)
	require.NoError(t, err)
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Len(t, got.list, 2)
	assert.Equal(t, Attempt{Provider: "test", KeyID: "a", Failover: 0, Status: 429, Kind: KindRate, Bench: 30 * time.Second}, got.list[0])
	assert.Equal(t, Attempt{Provider: "test", KeyID: "b", Failover: 1, Status: 200, Kind: KindNone}, got.list[1])
	assert.Equal(t, []any{"request-1", "request-1"}, got.mark, "on the request's context")

	// No answer: the vendor is gone.
	got = attempts{}
	dead, err := New("dead", threeKeys(), OnAttempt(got.add))
	require.NoError(t, err)
	client := &http.Client{Transport: dead.Transport(nil)}
	_, err = client.Get("http://127.0.0.1:1/")
	require.Error(t, err)
	require.NotEmpty(t, got.list)
	assert.True(t, got.list[0].Failed)
	assert.Zero(t, got.list[0].Status)
	assert.Equal(t, "dead", got.list[0].Provider)

	// Pool.Do: an error that is no vendor's answer is an attempt that failed.
	got = attempts{}
	_ = f.pool.Do(ctx, "m", func(context.Context, Key) error { return io.ErrUnexpectedEOF })
	require.Len(t, got.list, 1)
	assert.True(t, got.list[0].Failed)
	got = attempts{}
	err = f.pool.Do(ctx, "m", func(context.Context, Key) error {
		if len(got.list) == 0 {
			return &ProviderError{Kind: KindTransient}
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, got.list, 2)
	assert.Equal(t, KindTransient, got.list[0].Kind)
	assert.Positive(t, got.list[0].Bench)
	assert.Equal(t, 1, got.list[1].Failover)
	assert.Equal(t, "m", got.list[1].Model)
}

// OnSettle hears the tokens each answer used, once the pool counts them:
// through the Transport as the body is read, and from Pool.Do's Settle;
// a pool that counts no tokens never calls it.
func TestOnSettleHearsTheTokensCounted(t *testing.T) {
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`)
	}))
	t.Cleanup(vendor.Close)
	var got []Settlement
	pool, err := New("test", threeKeys(), WithLimits(Limits{TPM: 1000}), OnSettle(func(s Settlement) { got = append(got, s) }))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	resp, err := client.Post(vendor.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
	require.NoError(t, err)
	assert.Empty(t, got, "nothing counted before the body is read")
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Len(t, got, 1)
	assert.Equal(t, "test", got[0].Provider)
	assert.Equal(t, "m", got[0].Model)
	assert.Equal(t, int64(10), got[0].Tokens)
	assert.NotEmpty(t, got[0].KeyID)

	got = nil
	require.NoError(t, pool.Do(t.Context(), "m", func(ctx context.Context, _ Key) error {
		Settle(ctx, 20, 5)
		return nil
	}))
	require.Len(t, got, 1)
	assert.Equal(t, int64(25), got[0].Tokens)
	assert.Equal(t, "m", got[0].Model)

	got = nil
	plain, err := New("plain", threeKeys(), OnSettle(func(s Settlement) { got = append(got, s) }))
	require.NoError(t, err)
	require.NoError(t, plain.Do(t.Context(), "m", func(ctx context.Context, _ Key) error {
		Settle(ctx, 20, 5)
		return nil
	}))
	assert.Empty(t, got, "a pool without a token limit or a price counts no tokens")
}
