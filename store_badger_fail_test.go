package keypool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failBound is the bound of Close in the tests of a failing directory.
const failBound = time.Second

// failRun is a pool on a Badger store serving requests from a few
// goroutines, as a service does while its state directory fails.
type failRun struct {
	t      *testing.T
	dir    string
	logs   *logLines
	store  *BadgerStore
	pool   *Pool
	served atomic.Int64
	failed atomic.Int64
	stop   chan struct{}
	wg     sync.WaitGroup
}

// startFailRun opens a store in dir, benches key a, and starts serving.
// Before serving, prepare may change the store (its write seams).
func startFailRun(t *testing.T, dir string, prepare func(*BadgerStore)) *failRun {
	t.Helper()
	r := &failRun{t: t, dir: dir, logs: &logLines{}, stop: make(chan struct{})}
	s, err := OpenBadgerStore(dir, WithFlushInterval(50*time.Millisecond), WithBadgerLogger(r.logs.logger()))
	require.NoError(t, err)
	s.cfg.closeBound = failBound
	if prepare != nil {
		prepare(s)
	}
	r.store = s
	r.pool, err = New("openai", threeKeys(), WithStore(s), WithLimits(Limits{RPM: 1 << 30, RPD: 1 << 30}))
	require.NoError(t, err)
	require.NoError(t, r.pool.Do(t.Context(), "m", func(_ context.Context, k Key) error {
		if k.ID == "a" {
			return &ProviderError{Kind: KindAuth, Status: 401}
		}
		return nil
	}))
	for range 4 {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				select {
				case <-r.stop:
					return
				default:
				}
				if err := r.pool.Do(context.Background(), "m", func(context.Context, Key) error { return nil }); err != nil {
					r.failed.Add(1)
				} else {
					r.served.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	t.Cleanup(r.stopLoad)
	return r
}

// serveFor lets the run serve for d and returns how many requests it
// served meanwhile; none may fail.
func (r *failRun) serveFor(d time.Duration) int64 {
	before := r.served.Load()
	time.Sleep(d)
	require.Zero(r.t, r.failed.Load(), "requests failed")
	return r.served.Load() - before
}

func (r *failRun) stopLoad() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	r.wg.Wait()
}

// waitHealth waits, at most 5 s, until the store's health is failing or
// not, and returns how long that took.
func (r *failRun) waitHealth(failing bool) time.Duration {
	r.t.Helper()
	start := time.Now()
	for (r.store.Health() != nil) != failing {
		require.Less(r.t, time.Since(start), 5*time.Second, "the store's health never became failing=%v", failing)
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(start)
}

// benchDuring benches key c for model m while the store fails: the bench
// holds in memory, and its write waits.
func (r *failRun) benchDuring() {
	err := r.store.Bench(r.t.Context(), Bench{Provider: "openai", KeyID: "c", Model: "m", Kind: KindQuota,
		Until: time.Now().Add(time.Hour), Level: 1})
	require.Error(r.t, err)
	assert.Contains(r.t, err.Error(), `benches of key "c" of provider "openai" not saved yet`)
}

// closeTimed stops the run and closes the pool and the store, returning
// how long the store's Close took, and its error.
func (r *failRun) closeTimed() (time.Duration, error) {
	r.stopLoad()
	poolStart := time.Now()
	_ = r.pool.Close()
	require.Less(r.t, time.Since(poolStart), time.Second, "Pool.Close does not wait on a failing store")
	start := time.Now()
	err := r.store.Close()
	return time.Since(start), err
}

// closeFindsAll closes a store that writes again: Close writes everything
// at once, and a reopen finds everything the store held, which it returns.
func (r *failRun) closeFindsAll() map[string]KeyStats {
	r.t.Helper()
	r.stopLoad()
	now := time.Now()
	want := keyStates(r.t, r.store, now)
	closing, err := r.closeTimed()
	require.NoError(r.t, err)
	assert.Less(r.t, closing, 5*time.Second, "Close writes at once, well within its bound of 15 s")
	r.checkSpell(true)
	assert.Equal(r.t, want, keyStates(r.t, reopen(r.t, r.dir), now), "a reopen finds everything the store held")
	r.t.Logf("Close took %v", closing)
	return want
}

// quiesce stops the load and writes what the store holds, which it returns
// at the moment it returns.
func (r *failRun) quiesce() (time.Time, map[string]KeyStats) {
	r.t.Helper()
	r.stopLoad()
	require.NoError(r.t, r.store.Flush(r.t.Context()))
	now := time.Now()
	return now, keyStates(r.t, r.store, now)
}

// closeGivesUp closes a store that is failing: Close returns within its
// bound with an error that wraps context.DeadlineExceeded and holds each
// of wants.
func (r *failRun) closeGivesUp(wants ...string) error {
	r.t.Helper()
	closing, err := r.closeTimed()
	require.ErrorIs(r.t, err, context.DeadlineExceeded)
	for _, w := range wants {
		assert.Contains(r.t, err.Error(), w)
	}
	assert.GreaterOrEqual(r.t, closing, failBound)
	assert.Less(r.t, closing, failBound+500*time.Millisecond, "Close returns within its bound")
	r.checkSpell(false)
	r.t.Logf("Close returned after %v with: %v", closing, err)
	return err
}

// checkSpell checks the lines logged: one when the spell started, one when
// it ended if it did, and Badger's own lines, counted, at most two.
func (r *failRun) checkSpell(ended bool) {
	r.t.Helper()
	lines := r.logs.all()
	badgerLines := 0
	for _, l := range lines {
		if strings.Contains(l, " badger: ") {
			badgerLines++
		}
	}
	assert.Equal(r.t, 1, r.logs.count(spellStarts), "lines when the spell started: %q", lines)
	assert.Equal(r.t, map[bool]int{true: 1}[ended], r.logs.count(spellEnds), "lines when the spell ended: %q", lines)
	assert.LessOrEqual(r.t, badgerLines, 2, "Badger's lines: %q", lines)
	assert.Len(r.t, lines, 1+map[bool]int{true: 1}[ended]+badgerLines, "no other line: %q", lines)
	r.t.Logf("%d lines logged: %q", len(lines), lines)
}

// keyStates returns what s holds for each of threeKeys at now.
func keyStates(t *testing.T, s Store, now time.Time) map[string]KeyStats {
	t.Helper()
	out := map[string]KeyStats{}
	for _, k := range threeKeys() {
		st, err := s.State(t.Context(), "openai", k.ID, now)
		require.NoError(t, err)
		out[k.ID] = st
	}
	return out
}

// reopen opens the store in dir again, waiting at most 5 s for a database
// a goroutine of the last store is still closing.
func reopen(t *testing.T, dir string) *BadgerStore {
	t.Helper()
	start := time.Now()
	for {
		s, err := OpenBadgerStore(dir, WithBadgerLogger(new(logLines).logger()))
		if err == nil {
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
		require.ErrorIs(t, err, ErrStoreLocked)
		require.Less(t, time.Since(start), 5*time.Second, "the directory stays held")
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 21: the state directory removed under load, as a cleanup job
// would; then the service stops.
func TestBadgerStoreDirectoryRemovedUnderLoad(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	r := startFailRun(t, dir, nil)
	require.Positive(t, r.serveFor(200*time.Millisecond))
	require.NoError(t, os.RemoveAll(dir))
	took := r.waitHealth(true)
	assert.ErrorContains(t, r.store.Health(), "keypool: badger store: state directory is gone: stat "+dir+": no such file or directory")
	assert.Positive(t, r.serveFor(300*time.Millisecond), "the pool serves from memory")
	assert.Len(t, keysOf(r.store), 3)
	r.closeGivesUp("keypool: badger store: closing: the windows of 3 keys and the benches of 1 keys are not saved (state directory is gone")
	t.Logf("failure seen after %v", took)

	s := reopen(t, dir)
	assert.Empty(t, keysOf(s), "the state went with the directory")
}

// Issue 21: the state directory removed, then made again: the store opens
// a database in it and writes everything it holds.
func TestBadgerStoreDirectoryMadeAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	r := startFailRun(t, dir, nil)
	require.Positive(t, r.serveFor(200*time.Millisecond))
	require.NoError(t, os.RemoveAll(dir))
	r.waitHealth(true)
	r.benchDuring()
	require.Positive(t, r.serveFor(200*time.Millisecond))
	require.NoError(t, os.Mkdir(dir, 0o700))
	took := r.waitHealth(false)
	require.Positive(t, r.serveFor(200*time.Millisecond))
	t.Logf("writing again %v after the directory was made again", took)
	want := r.closeFindsAll()
	assert.Equal(t, KindQuota, want["c"].Models[0].Bench.Kind, "with the bench set while the directory was gone")
}

// failWrites makes the store's writes fail with the error fail holds, while
// it holds one: the test seams of a read-only or full directory that the
// store's check of its directory does not see.
func failWrites(s *BadgerStore, fail *atomic.Pointer[error]) {
	update, flush := s.update, s.flushBatch
	s.update = func(fn func(*badger.Txn) error) error {
		if err := fail.Load(); err != nil {
			return *err
		}
		return update(fn)
	}
	s.flushBatch = func(wb *badger.WriteBatch) error {
		if err := fail.Load(); err != nil {
			return *err
		}
		return flush(wb)
	}
}

// Issue 21, through the store's write seams: writes failing as on a
// read-only or full directory, then succeeding again — or the service
// stopping first.
func TestBadgerStoreWritesFail(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EROFS, syscall.ENOSPC} {
		t.Run(errno.Error()+"/comes back", func(t *testing.T) {
			var fail atomic.Pointer[error]
			r := startFailRun(t, filepath.Join(t.TempDir(), "state"), func(s *BadgerStore) { failWrites(s, &fail) })
			require.Positive(t, r.serveFor(200*time.Millisecond))
			injected := error(&os.PathError{Op: "write", Path: r.dir + "/000001.vlog", Err: errno})
			fail.Store(&injected)
			r.waitHealth(true)
			require.ErrorIs(t, r.store.Health(), errno)
			r.benchDuring()
			require.Positive(t, r.serveFor(200*time.Millisecond))
			fail.Store(nil)
			r.waitHealth(false)
			r.closeFindsAll()
		})
		t.Run(errno.Error()+"/closed while failing", func(t *testing.T) {
			var fail atomic.Pointer[error]
			r := startFailRun(t, filepath.Join(t.TempDir(), "state"), func(s *BadgerStore) { failWrites(s, &fail) })
			require.Positive(t, r.serveFor(200*time.Millisecond))
			now, before := r.quiesce()
			injected := error(&os.PathError{Op: "write", Path: r.dir + "/000001.vlog", Err: errno})
			fail.Store(&injected)
			r.waitHealth(true)
			r.benchDuring()

			r.closeGivesUp("the windows of 0 keys and the benches of 1 keys are not saved", errno.Error())
			assert.Equal(t, before, keyStates(t, reopen(t, r.dir), now), "a reopen finds what was written before the failure")
		})
	}
}

// A store over a database the caller opened does not open it again when
// its directory is made again: it keeps failing, and says so.
func TestBadgerStoreOfTheCallerDirectoryMadeAgain(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	require.NoError(t, err)
	var logs logLines
	s, err := newBadgerStoreOver(db, WithFlushInterval(time.Hour), WithBadgerLogger(logs.logger()))
	require.NoError(t, err)
	s.cfg.closeBound = 100 * time.Millisecond
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.Mkdir(dir, 0o700))
	err = s.Flush(t.Context())
	require.ErrorContains(t, err, "was removed and made again")
	require.Equal(t, err, s.Health())
	require.ErrorIs(t, s.Close(), context.DeadlineExceeded)
	assert.Equal(t, 1, logs.count(spellStarts))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing was written to the directory made again")
}

// Shutdown returns ctx's error when ctx has ended, and a second Shutdown
// returns nil.
func TestBadgerStoreShutdownTwice(t *testing.T) {
	var logs logLines
	s, err := OpenBadgerStore(t.TempDir(), WithBadgerLogger(logs.logger()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := s.shutdown(ctx); err != nil {
		require.ErrorIs(t, err, context.Canceled)
	}
	require.NoError(t, s.shutdown(t.Context()))
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.Flush(t.Context()), errStoreClosed)
	require.True(t, errors.Is(s.Bench(t.Context(), Bench{Provider: "p", KeyID: "k", AllModels: true, Kind: KindAuth,
		Until: time.Now().Add(time.Hour)}), errStoreClosed))
}
