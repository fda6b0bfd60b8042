package keypool

import (
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A context that names routes keeps a Fallback's request off the others,
// and fails as every route benched would when none named can take it.
func TestOnlyRoutesKeepsARequestOffOtherRoutes(t *testing.T) {
	clock := newTestClock()
	first, simA := simRoute(t, "free-a", clock, 100, "a1")
	second, simB := simRoute(t, "free-b", clock, 1, "b1")
	fb, err := NewFallback([]Route{first, second}, WithClock(clock.Now))
	require.NoError(t, err)
	send := func(names ...string) error {
		req := chatRequest(t, "gpt-4o-mini")
		req = req.WithContext(OnlyRoutes(req.Context(), names...))
		resp, err := fb.RoundTrip(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, send("free-b"))
	err = send("free-b") // b's one request a day is spent; a is not for it
	var na *NoAvailableKeyError
	assert.True(t, errors.As(err, &na), "second request only to free-b: err = %v, want *NoAvailableKeyError", err)
	assert.Equal(t, int64(0), simA.Totals().Requests, "requests free-a received")
	assert.Equal(t, int64(1), simB.Totals().Requests, "requests free-b received")
	require.NoError(t, send()) // no names: every route
	assert.Equal(t, int64(1), simA.Totals().Requests, "requests free-a received with no names")
}

// NotifySettle hears what a request used once its answer's body is read,
// with the cost at the model's price, even when the pool counts neither
// tokens nor spend itself.
func TestNotifySettleHearsTheSettledUse(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     []Option
		wantCost bool
	}{
		{"no limits, no price", nil, false},
		{"priced", []Option{WithPrices(map[string]Price{"gpt-4o-mini": {Input: 1, Output: 2}})}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newTestClock()
			route, _ := simRoute(t, "sim", clock, 100, "k1")
			pool, err := New("sim", []Key{{Secret: "k1", ID: "k1"}}, append(tc.opts, WithClock(clock.Now))...)
			require.NoError(t, err)
			route.Pool = pool
			fb, err := NewFallback([]Route{route}, WithClock(clock.Now))
			require.NoError(t, err)
			var got []Settlement
			req := chatRequest(t, "gpt-4o-mini")
			req = req.WithContext(NotifySettle(req.Context(), func(u Settlement) { got = append(got, u) }))
			resp, err := fb.RoundTrip(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Len(t, got, 1, "NotifySettle calls")
			assert.Equal(t, "sim", got[0].Provider)
			assert.Equal(t, "k1", got[0].KeyID)
			assert.Positive(t, got[0].Tokens, "tokens the answer reported")
			assert.Equal(t, tc.wantCost, got[0].Cost > 0, "cost %d", got[0].Cost)
		})
	}
}

func TestReadRequestAndReserve(t *testing.T) {
	info := ReadRequest("/v1/chat/completions", []byte(`{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"12345678"}]}`))
	assert.Equal(t, "m", info.Model)
	assert.Equal(t, int64(100), info.MaxOutput)
	assert.Equal(t, "gemini-2.0-flash", ReadRequest("/v1beta/models/gemini-2.0-flash:generateContent", nil).Model)
	cost, unbounded := Price{Input: 1, Output: 10}.Reserve(info, DefaultEstimate(info))
	assert.False(t, unbounded)
	assert.Equal(t, int64((DefaultEstimate(info)-100)*1+100*10), cost, "reserve: the estimated input and the output bound")
	_, unbounded = Price{Input: 1}.Reserve(ReadRequest("/", []byte(`{"model":"m"}`)), 10)
	assert.True(t, unbounded, "no output bound")
}
