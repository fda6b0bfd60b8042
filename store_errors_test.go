package keypool

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool/internal/notify"
)

// failingStore is a memory store whose benches fail while failBench is set,
// and whose Health reports health.
type failingStore struct {
	*memoryStore
	failBench atomic.Bool
	mu        sync.Mutex // guards health
	health    error
}

func (s *failingStore) Bench(ctx context.Context, b Bench) error {
	if s.failBench.Load() {
		return errDiskFull
	}
	return s.memoryStore.Bench(ctx, b)
}

// A store the pool reads the health of is a HealthReporter.
var _ HealthReporter = (*failingStore)(nil)

func (s *failingStore) Health() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.health
}

func (s *failingStore) setHealth(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.health = err
}

func TestOnStoreErrorOncePerSpell(t *testing.T) {
	store := &failingStore{memoryStore: newMemoryStore()}
	var told []error
	p, err := New("x", threeKeys(), WithStore(store), OnStoreError(func(err error) { told = append(told, err) }))
	require.NoError(t, err)
	fail := func(context.Context, Key) error { return &ProviderError{Kind: KindRate, Status: 429} }
	ok := func(context.Context, Key) error { return nil }

	store.failBench.Store(true)
	_ = p.Do(t.Context(), "m", fail) // three keys fail: three benches fail to be written
	require.Len(t, told, 1, "a spell of failures is told once")
	assert.ErrorIs(t, told[0], errDiskFull)

	store.failBench.Store(false)
	require.NoError(t, p.Do(t.Context(), "other", ok))
	require.Len(t, told, 1, "reads that succeed do not end a spell of failed writes")
	_ = p.Do(t.Context(), "other", fail)
	require.Len(t, told, 2, "a write that succeeds ends it, told once")
	assert.NoError(t, told[1])

	store.setHealth(errDiskFull) // a write behind fails: the store says so
	require.NoError(t, p.Do(t.Context(), "third", ok))
	require.NoError(t, p.Do(t.Context(), "third", ok))
	require.Len(t, told, 3, "a store's own failure is told at the next call")
	assert.ErrorIs(t, told[2], errDiskFull)
	store.setHealth(nil)
	require.NoError(t, p.Do(t.Context(), "third", ok))
	require.Len(t, told, 4)
	assert.NoError(t, told[3])
}

// notifyingStore is a failingStore that tells of each change of its health,
// as a HealthNotifier.
type notifyingStore struct {
	failingStore
	watch notify.Listeners
}

var _ HealthNotifier = (*notifyingStore)(nil)

func (s *notifyingStore) NotifyHealth(f func()) func() { return s.watch.Add(f) }

func (s *notifyingStore) change(err error) {
	s.setHealth(err)
	s.watch.Call()
}

// TestOnStoreErrorHearsAChangeWithoutARequest: over a HealthNotifier, a
// failure that starts and ends between requests is told when it happens;
// a closed pool hears no more.
func TestOnStoreErrorHearsAChangeWithoutARequest(t *testing.T) {
	store := &notifyingStore{failingStore: failingStore{memoryStore: newMemoryStore()}}
	var mu sync.Mutex
	var told []error
	p, err := New("x", threeKeys(), WithStore(store), OnStoreError(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		told = append(told, err)
	}))
	require.NoError(t, err)
	store.change(errDiskFull)
	store.change(nil)
	mu.Lock()
	assert.Equal(t, []error{errDiskFull, nil}, told, "the spell's start and end, with no request")
	mu.Unlock()
	require.NoError(t, p.Close())
	store.change(errDiskFull)
	mu.Lock()
	assert.Len(t, told, 2, "a closed pool hears no more")
	mu.Unlock()
}
