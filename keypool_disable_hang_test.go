package keypool

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// slowSetDisabled is a store whose writes of a disabled key wait for
// release (or their context).
type slowSetDisabled struct {
	Store
	entered chan struct{}
	release chan struct{}
}

func (s *slowSetDisabled) SetDisabled(ctx context.Context, provider, keyID string, d *Disabled) error {
	close(s.entered)
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.(DisabledStore).SetDisabled(ctx, provider, keyID, d)
}

func (s *slowSetDisabled) Disabled(ctx context.Context, provider string) (map[string]Disabled, error) {
	return s.Store.(DisabledStore).Disabled(ctx, provider)
}

// An operator's Disable that waits on a slow store holds neither the
// request that finds a read of the disabled keys due nor Close: the read
// is started aside, and Close is bounded whatever the store does.
func TestSlowDisableHoldsNoRequestNorClose(t *testing.T) {
	clock := newTestClock()
	store := &slowSetDisabled{Store: NewMemoryStore(), entered: make(chan struct{}), release: make(chan struct{})}
	pool, err := New("openai", threeKeys(), WithStore(store), WithClock(clock.Now))
	require.NoError(t, err)
	disabled := make(chan error, 1)
	go func() { disabled <- pool.Disable(context.Background(), "a", "ops") }()
	t.Cleanup(func() { close(store.release); <-disabled })
	<-store.entered

	clock.Advance(DisabledRefresh)
	done := make(chan error, 1)
	go func() {
		done <- pool.Do(context.Background(), "m", func(context.Context, Key) error { return nil })
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(3 * time.Second):
		t.Fatal("a request that found a read of the disabled keys due waited for a Disable's store write")
	}

	closed := make(chan error, 1)
	go func() { closed <- pool.Close() }()
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		t.Fatal("Close waited for a Disable's store write")
	}
}
