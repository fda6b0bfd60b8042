package keypool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPriorityOrdersKeys holds the order of keys: a lower Priority first,
// free before paid within a Priority, round-robin among equals, and a key
// of a later tier only when every earlier key is full.
func TestPriorityOrdersKeys(t *testing.T) {
	keys := []Key{
		{Secret: "s-personal", ID: "personal", Priority: 1},
		{Secret: "s-company-paid", ID: "company-paid", Paid: true},
		{Secret: "s-company-1", ID: "company-1", Limits: Limits{RPM: 2}},
		{Secret: "s-company-2", ID: "company-2", Limits: Limits{RPM: 2}},
	}
	clock := newTestClock()
	p, err := New("x", keys, WithClock(clock.Now), WithLimits(Limits{RPM: 1}))
	require.NoError(t, err)
	var got []string
	for range 7 {
		err := p.Do(t.Context(), "m", func(_ context.Context, k Key) error {
			got = append(got, k.ID)
			return nil
		})
		if err != nil {
			got = append(got, "none")
		}
	}
	// The two free keys of priority 0 in turn until their minutes are
	// full, then the paid key of priority 0, then priority 1, then none.
	assert.Equal(t, []string{"company-1", "company-2", "company-1", "company-2", "company-paid", "personal", "none"}, got)
}

func TestPriorityNegativeRefused(t *testing.T) {
	_, err := New("x", []Key{{Secret: "s", ID: "a", Priority: -1}})
	require.ErrorContains(t, err, "key a: priority -1 is negative")
}
