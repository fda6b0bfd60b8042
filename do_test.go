package keypool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// minuteTokens returns what the pool's windows count for key id and model.
func minuteTokens(t *testing.T, p *Pool, id, model string) int64 {
	t.Helper()
	for _, ks := range p.Stats() {
		if ks.ID != id {
			continue
		}
		for _, m := range ks.Models {
			if m.Model == model {
				return m.Usage.MinuteTokens
			}
		}
	}
	return 0
}

func TestDoSettlesTokens(t *testing.T) {
	tests := []struct {
		name string
		fn   func(ctx context.Context, k Key) error
		want int64
	}{
		{"settled", func(ctx context.Context, _ Key) error { Settle(ctx, 100, 20); return nil }, 120},
		{"settled twice: the last counts", func(ctx context.Context, _ Key) error {
			Settle(ctx, 400, 100)
			Settle(ctx, 60, 20)
			return nil
		}, 80},
		{"negative is zero", func(ctx context.Context, _ Key) error { Settle(ctx, -7, -1); return nil }, 0},
		{"not settled: the estimate stands", func(context.Context, Key) error { return nil }, DefaultEstimate(RequestInfo{Model: "m"})},
		{"a failure counts nothing", func(ctx context.Context, _ Key) error {
			Settle(ctx, 200, 100)
			return &ProviderError{Kind: KindTransient, Status: 503}
		}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New("x", []Key{{Secret: "sk-one", ID: "one"}}, WithLimits(Limits{TPM: 100_000}))
			require.NoError(t, err)
			_ = p.Do(t.Context(), "m", tt.fn)
			assert.Equal(t, tt.want, minuteTokens(t, p, "one", "m"))
		})
	}
}

func TestDoSettledTokensHoldTheWindow(t *testing.T) {
	p, err := New("x", []Key{{Secret: "sk-one", ID: "one"}}, WithLimits(Limits{TPM: 3000}))
	require.NoError(t, err)
	used := func(ctx context.Context, _ Key) error { Settle(ctx, 1000, 400); return nil }
	require.NoError(t, p.Do(t.Context(), "m", used))
	require.NoError(t, p.Do(t.Context(), "m", used))
	err = p.Do(t.Context(), "m", used)
	var na *NoAvailableKeyError
	assert.ErrorAs(t, err, &na, "2800 settled + an estimate of 1024 is over TPM 3000")
}

func TestSettleOutsideDoDoesNothing(t *testing.T) {
	assert.NotPanics(t, func() { Settle(context.Background(), 10, 0) })
}
