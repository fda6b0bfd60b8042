package keypool

import (
	"context"
	"io"
	"net/http"
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
