package keypool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/keypool-go/keypool/internal/notify"
)

// ErrStoreLocked reports that a state directory is held by another process
// (or by another store in this one): Badger lets one owner open a directory
// at a time. Test for it with errors.Is.
var ErrStoreLocked = errors.New("state directory is held by another process")

// errStoreClosed is what a BadgerStore's writes return once Close began.
var errStoreClosed = errors.New("keypool: badger store: closed")

// BadgerStore keeps a pool's state in memory, as NewMemoryStore's store does, and in a
// Badger database, so that a restart — or a kill -9 — resumes with the
// windows and benches. Benches and their levels are written through:
// a bench is in the database when Bench returns, which a crash of the
// process does not lose; a crash of the operating system or the machine
// can lose what it wrote in the last seconds, unless WithSyncWrites is set.
// Windows are written behind, in one batch about once a second
// (WithFlushInterval) and at Flush and Close, so the hot path never waits
// on disk. Opening the store loads what it holds; state that has expired is
// dropped.
//
// When its directory fails — removed, read-only, or full (less free than
// three of Badger's memtables: 24 MiB with the store's defaults) — the
// store keeps serving from memory and writes nothing to it. Health reports
// the failure, and the store's logger gets one line when it starts and one
// when it ends. When the directory comes back — writable again, space
// freed, or made again, where the store opens a new database — the store
// writes everything the directory lacks. A record Badger would refuse (over
// its size limits) is left out and logged once, naming its key: it never
// keeps another key's records from being written.
//
// Badger itself starts root spans named "Badger.Compaction" and "Badger.GC"
// through the global OpenTelemetry tracer provider; filter them by name in a
// sampler if they are unwanted.
//
// A BadgerStore is safe for concurrent use. One process can open a
// directory once: share the store between pools rather than opening it
// twice.
type BadgerStore struct {
	*memoryStore // the windows, benches and spend; Take, Learn, State and Keys are its
	cfg          badgerConfig
	log          *badgerLogger
	owned        bool // the store opened the database: it closes it, and opens one again in a directory made again

	db  atomic.Pointer[badger.DB]
	dir atomic.Pointer[stateDir] // nil for a database that keeps no files
	gen atomic.Uint64            // counts the databases opened again

	health atomic.Pointer[error] // nil while writes succeed
	closed atomic.Bool           // Close began
	// disabledUnwritten reports that the database's records of keys out
	// of rotation may differ from memory's: the next flush writes them.
	disabledUnwritten atomic.Bool

	stop chan struct{}
	done sync.WaitGroup

	// flushMu serializes flushes — the flusher's, Flush's and Close's —
	// and the opening of a database again.
	flushMu sync.Mutex
	// spellMu serializes the changes of health with their log lines, so
	// that the lines of a failing spell come in order.
	spellMu      sync.Mutex
	failingSince time.Time // guarded by spellMu; zero while writes succeed
	healthWatch  notify.Listeners
	// errMu guards unwritten and refused.
	errMu     sync.Mutex
	unwritten map[keyRef]uint64  // keys whose benches are not written, and the version to write
	refused   map[recordRef]bool // records Badger would refuse, each logged once

	closeMu sync.Mutex // serializes Close

	// update and flushBatch write to the database: its Update and
	// WriteBatch.Flush, which tests replace to make writes fail.
	update     func(func(*badger.Txn) error) error
	flushBatch func(*badger.WriteBatch) error
}

var (
	_ Store          = (*BadgerStore)(nil)
	_ HealthNotifier = (*BadgerStore)(nil)
)

// recordRef names one record of a key: its windows or its benches.
type recordRef struct {
	keyRef
	benches bool
}

func (r recordRef) String() string {
	if r.benches {
		return "benches"
	}
	return "windows"
}

// OpenBadgerStore opens (creating if needed) a Badger database in dir and
// returns a store over it that loads what it holds. A directory held by
// another process gives an error that errors.Is reports as ErrStoreLocked;
// one that cannot be written, is not a Badger database or has less free
// than the store keeps in reserve gives an error naming it; so does a bad
// option. Empty memtable files a killed process left are removed first,
// each with a warning. Close closes the database.
func OpenBadgerStore(dir string, opts ...Option) (*BadgerStore, error) {
	if dir == "" {
		return nil, errors.New("keypool: badger store: no directory")
	}
	cfg, err := newBadgerConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("keypool: badger store %s: %w", dir, err)
	}
	log := newBadgerLogger(cfg.logger)
	db, err := openBadgerDir(badgerOptions(dir, cfg, log), log)
	if err != nil {
		if isBadgerLocked(err) {
			return nil, fmt.Errorf("keypool: badger store %s: %w", dir, ErrStoreLocked)
		}
		return nil, fmt.Errorf("keypool: badger store %s: %w", dir, err)
	}
	s, err := newBadgerStore(db, true, cfg, log)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("keypool: badger store %s: %w", dir, err)
	}
	return s, nil
}

// newBadgerStoreOver returns a store over a Badger database the caller
// opened and owns (tests use an in-memory one): Close stops the store but
// leaves db open, and a
// directory made again is not opened again. The store's records are under
// keys that start with "kp2/" (and "kp1/", the layout it reads and
// replaces). A bad option gives an error naming it.
func newBadgerStoreOver(db *badger.DB, opts ...Option) (*BadgerStore, error) {
	if db == nil {
		return nil, errors.New("keypool: badger store: nil database")
	}
	cfg, err := newBadgerConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("keypool: badger store: %w", err)
	}
	s, err := newBadgerStore(db, false, cfg, newBadgerLogger(cfg.logger))
	if err != nil {
		return nil, fmt.Errorf("keypool: badger store: %w", err)
	}
	return s, nil
}

func newBadgerStore(db *badger.DB, owned bool, cfg badgerConfig, log *badgerLogger) (*BadgerStore, error) {
	s := &BadgerStore{memoryStore: newMemoryStore(), cfg: cfg, log: log, owned: owned, stop: make(chan struct{}),
		unwritten: map[keyRef]uint64{}, refused: map[recordRef]bool{}, flushBatch: (*badger.WriteBatch).Flush}
	s.update = func(fn func(*badger.Txn) error) error { return s.db.Load().Update(fn) }
	s.db.Store(db)
	d, err := newStateDir(db.Opts())
	if err != nil {
		return nil, err
	}
	s.dir.Store(d)
	legacy, err := s.load(db)
	if err != nil {
		return nil, err
	}
	s.replaceLegacy(legacy)
	s.done.Add(2)
	go s.every(s.cfg.flushEvery, func() { _ = s.flush() })
	go s.every(s.cfg.gcEvery, s.collect)
	return s, nil
}

// Bench implements Store: the bench, or the level, is written through.
func (s *BadgerStore) Bench(ctx context.Context, b Bench) error {
	if err := s.memoryStore.Bench(ctx, b); err != nil {
		return err
	}
	return s.writeBenches(keyRef{b.Provider, b.KeyID})
}

// Unbench implements Store: the change is written through, the windows'
// with what else waits to be written.
func (s *BadgerStore) Unbench(ctx context.Context, provider, keyID string) error {
	_ = s.memoryStore.Unbench(ctx, provider, keyID)
	if err := s.writeBenches(keyRef{provider, keyID}); err != nil {
		return err
	}
	return s.Flush(ctx)
}

// ResetSpend implements SpendResetter: the change is written through, with
// what else waits to be written.
func (s *BadgerStore) ResetSpend(ctx context.Context, provider, keyID string) error {
	_ = s.memoryStore.ResetSpend(ctx, provider, keyID)
	return s.Flush(ctx)
}

// SetDisabled implements DisabledStore: the change is written through,
// and made in memory only once it is.
func (s *BadgerStore) SetDisabled(ctx context.Context, provider, keyID string, d *Disabled) error {
	if s.closed.Load() {
		return errStoreClosed
	}
	key := recordKey(disabledPrefix, keyRef{provider, keyID})
	gen := s.gen.Load()
	if err := s.update(func(txn *badger.Txn) error {
		if d == nil {
			return txn.Delete(key)
		}
		return txn.Set(key, encodeDisabled(*d))
	}); err != nil {
		return storeError(err)
	}
	err := s.memoryStore.SetDisabled(ctx, provider, keyID, d)
	if s.gen.Load() != gen {
		// The write may have gone to a database since replaced: the
		// next flush writes every record again.
		s.disabledUnwritten.Store(true)
	}
	return err
}

// writeDisabled makes the database's records of keys out of rotation what
// memory holds, in one transaction: for a database opened again, which may
// have lost some or kept one since put back.
func (s *BadgerStore) writeDisabled() error {
	s.memoryStore.disabledMu.Lock()
	defer s.memoryStore.disabledMu.Unlock()
	return s.update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false, Prefix: disabledPrefix})
		var stale [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			stale = append(stale, it.Item().KeyCopy(nil))
		}
		it.Close()
		for _, k := range stale {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		for ref, d := range s.memoryStore.disabled {
			if err := txn.Set(recordKey(disabledPrefix, ref), encodeDisabled(d)); err != nil {
				return err
			}
		}
		return nil
	})
}

// Health returns nil while the store's writes succeed, and otherwise the
// error of the failing write or of the check of its directory. It is one
// atomic load.
func (s *BadgerStore) Health() error {
	if err := s.health.Load(); err != nil {
		return *err
	}
	return nil
}

// benchesLife is how long a benches record outlives its last bench, by the
// wall clock Badger expires records by: bench levels outlast benches.
const benchesLife = 24 * time.Hour

// writeBenches writes a key's benches and levels through, unless the store
// is failing: then they wait for the flush that finds it back.
func (s *BadgerStore) writeBenches(ref keyRef) error {
	if s.closed.Load() {
		return errStoreClosed
	}
	err := s.Health()
	if err == nil {
		if _, err = s.dir.Load().check(); err != nil {
			err = storeError(err)
			s.setHealth(err)
		}
	}
	if err != nil {
		k := s.memoryStore.key(ref.provider, ref.keyID)
		k.mu.Lock()
		ver := k.benchVer
		k.mu.Unlock()
		s.errMu.Lock()
		s.unwritten[ref] = max(s.unwritten[ref], ver)
		s.errMu.Unlock()
		return fmt.Errorf("keypool: badger store: benches of key %s not saved yet: %w", keyName(ref), err)
	}
	err = s.putBenches(ref)
	if err != nil && !errors.Is(err, errRecordTooLarge) && !errors.Is(err, badger.ErrConflict) {
		// Losing every try to other writers of the key is no failure of
		// the store: the next flush writes the benches.
		s.setHealth(err)
	}
	return err
}

// putBenches writes a key's benches and levels. Writes of one key may race;
// each carries the key's bench version, and an older version never replaces
// a newer one. A failed write is made again at the next flush.
func (s *BadgerStore) putBenches(ref keyRef) error {
	k := s.memoryStore.key(ref.provider, ref.keyID)
	k.mu.Lock()
	val := k.encodeBenches(nil)
	ver := k.benchVer
	until := k.bench.until
	for _, m := range k.models {
		until = max(until, m.bench.until)
	}
	k.mu.Unlock()
	key := recordKey(benchesPrefix, ref)
	if err := limitsOf(s.db.Load().Opts()).check(key, val); err != nil {
		return s.refuse(recordRef{ref, true}, err)
	}
	life := max(time.Until(time.Unix(0, until)), 0) + benchesLife
	write := func(txn *badger.Txn) error {
		item, err := txn.Get(key)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			stored := uint64(0)
			if err := item.Value(func(v []byte) error {
				stored, err = benchesVersion(v)
				return err
			}); err == nil && stored >= ver {
				return nil
			}
		}
		return txn.SetEntry(badger.NewEntry(key, val).WithTTL(life))
	}
	gen := s.gen.Load()
	var err error
	for range 3 {
		if err = s.update(write); !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	s.errMu.Lock()
	switch {
	case err != nil || s.gen.Load() != gen:
		// A write to a database since replaced is no write.
		s.unwritten[ref] = max(s.unwritten[ref], ver)
	case s.unwritten[ref] <= ver:
		// An older version written does not make up for a newer one that
		// failed.
		delete(s.unwritten, ref)
	}
	if err == nil {
		delete(s.refused, recordRef{ref, true})
	}
	s.errMu.Unlock()
	if err != nil {
		return fmt.Errorf("keypool: badger store: writing benches of key %s: %w", keyName(ref), err)
	}
	return nil
}

// windowsLife is how long a windows record lives after it was written: the
// longest window is a day.
const windowsLife = 48 * time.Hour

// Flush implements Store: it writes the windows that changed since the last
// flush, and the benches whose writes failed. It returns an error when the
// store is failing (as Health does), or naming each key whose record Badger
// would refuse, the others written.
func (s *BadgerStore) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errStoreClosed
	}
	return s.flush()
}

// flush checks the directory — opening the database again in a directory
// made again — and writes what changed.
func (s *BadgerStore) flush() error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	var refused []error
	err := s.ready()
	if err == nil {
		refused, err = s.writeWindows()
	}
	if err == nil {
		var more []error
		more, err = s.writeUnwritten()
		refused = append(refused, more...)
	}
	if err == nil && s.disabledUnwritten.Load() {
		if err = s.writeDisabled(); err == nil {
			s.disabledUnwritten.Store(false)
		}
	}
	s.setHealth(err)
	if err != nil {
		return err
	}
	return errors.Join(refused...)
}

// ready returns nil when the store can write to its directory. When the
// directory was made again, it opens a new database in it, if the store
// opened the first one.
func (s *BadgerStore) ready() error {
	d := s.dir.Load()
	lost, err := d.check()
	if lost && s.owned {
		return s.reopen(d, err)
	}
	return storeError(err)
}

// reopen opens a database in the directory that was made again, and marks
// everything the store holds to be written to it. The old database is left
// open and never written to again: closing it would retry writing its
// memtable once a second, without end, to files that are gone — or into the
// new directory, among the new database's files.
func (s *BadgerStore) reopen(d *stateDir, cause error) error {
	fi, err := os.Stat(d.path)
	if err != nil || !fi.IsDir() {
		return storeError(cause)
	}
	fail := func(err error) error { return storeError(&dirError{err}) }
	if !sameDevice(fi, d.dir) {
		return fail(fmt.Errorf("state directory %s is now on another filesystem (an unmounted volume?)", d.path))
	}
	if err := (&stateDir{path: d.path, dir: fi, reserve: d.reserve}).usable(); err != nil {
		return fail(err)
	}
	db, err := openBadgerDir(badgerOptions(d.path, s.cfg, s.log), s.log)
	if err != nil {
		if isBadgerLocked(err) {
			err = ErrStoreLocked
		}
		return fail(fmt.Errorf("opening state directory %s again: %w", d.path, err))
	}
	nd, err := newStateDir(db.Opts())
	if err != nil {
		_ = db.Close()
		return fail(err)
	}
	s.db.Store(db)
	s.dir.Store(nd)
	s.gen.Add(1)
	s.disabledUnwritten.Store(true) // the new database may have lost them
	s.memoryStore.each(func(ref keyRef, k *memKey) {
		k.mu.Lock()
		k.dirty = true
		ver := k.benchVer
		k.mu.Unlock()
		if ver > 0 {
			s.errMu.Lock()
			s.unwritten[ref] = max(s.unwritten[ref], ver)
			s.errMu.Unlock()
		}
	})
	return nil
}

// writeWindows writes the windows that changed since the last flush, in one
// batch. A record Badger would refuse is left out of the batch and
// returned in refused: it never fails the others.
func (s *BadgerStore) writeWindows() (refused []error, err error) {
	db := s.db.Load()
	limits := limitsOf(db.Opts())
	gen := s.gen.Load()
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	var written []*memKey
	var refs []keyRef
	s.memoryStore.each(func(ref keyRef, k *memKey) {
		if err != nil {
			return
		}
		k.mu.Lock()
		if !k.dirty {
			k.mu.Unlock()
			return
		}
		val := k.encodeWindows(nil)
		k.dirty = false
		k.mu.Unlock()
		key := recordKey(windowsPrefix, ref)
		if e := limits.check(key, val); e != nil {
			refused = append(refused, s.refuse(recordRef{ref, false}, e))
			return
		}
		written = append(written, k)
		refs = append(refs, ref)
		if err = wb.SetEntry(badger.NewEntry(key, val).WithTTL(windowsLife)); err != nil && wb.Error() == nil {
			// Badger refused the entry and the batch goes on: a record
			// the store's check did not foresee.
			refused = append(refused, s.refuse(recordRef{ref, false}, fmt.Errorf("%w: %s", errRecordTooLarge, firstLine(err))))
			written, refs, err = written[:len(written)-1], refs[:len(refs)-1], nil
		}
	})
	if err == nil {
		err = s.flushBatch(wb)
	}
	if err == nil && s.gen.Load() != gen {
		err = errors.New("the database was opened again during the write")
	}
	if err != nil {
		// Nothing is lost: the keys are written again at the next flush.
		for _, k := range written {
			k.mu.Lock()
			k.dirty = true
			k.mu.Unlock()
		}
		return nil, storeError(fmt.Errorf("writing windows: %w", err))
	}
	s.errMu.Lock()
	if len(s.refused) > 0 {
		for _, ref := range refs {
			delete(s.refused, recordRef{ref, false})
		}
	}
	s.errMu.Unlock()
	return refused, nil
}

// writeUnwritten writes the benches whose writes failed or waited.
func (s *BadgerStore) writeUnwritten() (refused []error, err error) {
	s.errMu.Lock()
	refs := make([]keyRef, 0, len(s.unwritten))
	for ref := range s.unwritten {
		refs = append(refs, ref)
	}
	s.errMu.Unlock()
	for _, ref := range refs {
		switch err := s.putBenches(ref); {
		case err == nil, errors.Is(err, badger.ErrConflict):
			// Lost to other writers of the key: they wrote it, or the
			// next flush does.
		case errors.Is(err, errRecordTooLarge):
			refused = append(refused, err)
			s.errMu.Lock()
			delete(s.unwritten, ref)
			s.errMu.Unlock()
		default:
			return refused, err
		}
	}
	return refused, nil
}

// refuse returns the error of a record Badger would refuse, logging it the
// first time.
func (s *BadgerStore) refuse(r recordRef, cause error) error {
	err := fmt.Errorf("keypool: badger store: %s of key %s not saved: %w", r, keyName(r.keyRef), cause)
	s.errMu.Lock()
	told := s.refused[r]
	s.refused[r] = true
	s.errMu.Unlock()
	if !told {
		s.cfg.logger.Warn("keypool: badger store: a key's state is not saved", "err", err)
	}
	return err
}

// firstLine returns the first line of err's text, cut to 200 bytes: some
// of Badger's errors dump the key they refuse.
func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	if len(line) > 200 {
		line = line[:200] + "…"
	}
	return line
}

// keyName names a key in an error or a log line: its ID and its provider,
// each quoted and cut to 64 bytes. Secrets never reach a store.
func keyName(ref keyRef) string {
	return fmt.Sprintf("%s of provider %s", quoteCut(ref.keyID), quoteCut(ref.provider))
}

func quoteCut(s string) string {
	const n = 64
	if len(s) <= n {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:n], len(s))
}

// storeError prefixes err, if any, with the store's name.
func storeError(err error) error {
	if err == nil || strings.HasPrefix(err.Error(), "keypool: ") {
		return err
	}
	return fmt.Errorf("keypool: badger store: %w", err)
}

// setHealth records the outcome of a write or a check: a failure starts a
// failing spell, logged once; a success ends it, logged once.
func (s *BadgerStore) setHealth(err error) {
	if err == nil && s.health.Load() == nil {
		return
	}
	s.spellMu.Lock()
	defer s.spellMu.Unlock()
	now := time.Now()
	switch {
	case err != nil && s.failingSince.IsZero():
		s.failingSince = now
		s.health.Store(&err)
		s.cfg.logger.Warn("keypool: badger store failing; serving from memory until it writes again", "err", err)
		s.healthWatch.Go() // not under spellMu (nor flushMu): a listener may call back
	case err != nil:
		s.health.Store(&err)
	case !s.failingSince.IsZero():
		since := s.failingSince
		s.failingSince = time.Time{}
		s.health.Store(nil)
		s.log.flush()
		s.cfg.logger.Info("keypool: badger store writing again", "failed_for", now.Sub(since).Round(time.Millisecond))
		s.healthWatch.Go() // not under spellMu (nor flushMu): a listener may call back
	}
}

// NotifyHealth implements HealthNotifier.
func (s *BadgerStore) NotifyHealth(f func()) (remove func()) { return s.healthWatch.Add(f) }

// every calls fn every d until Close.
func (s *BadgerStore) every(d time.Duration, fn func()) {
	defer s.done.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			fn()
		}
	}
}

// collect garbage-collects Badger's value log, unless the store is failing.
func (s *BadgerStore) collect() {
	if s.Health() != nil {
		return
	}
	db := s.db.Load()
	for db.RunValueLogGC(0.5) == nil {
	}
}

// shutdownRetry is how often Close tries again to write while the store
// is failing.
const shutdownRetry = 250 * time.Millisecond

// shutdown is Close within ctx: it returns when the store has written what
// it holds, or when ctx ends, with an error that wraps ctx.Err() and says
// how many keys' windows and benches are not saved.
func (s *BadgerStore) shutdown(ctx context.Context) error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	done := make(chan error, 1)
	go func() { done <- s.finish(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		select {
		case err := <-done:
			return err
		default:
			return s.unsaved(ctx.Err())
		}
	}
}

// Close stops the store's goroutines, writes what it holds, and closes the
// database if the store opened it — within 15 seconds. While the store is
// failing it tries again four times a second until then; it then returns an
// error that says how many keys' windows and benches are not saved. A second
// Close returns nil.
//
// What Close leaves running when its 15 seconds end first: while the
// directory is gone, read-only or full, the database stays open, with its
// dozen idle goroutines and its files, until the process exits — closing it
// would retry writing Badger's memtable once a second without end, or kill
// the process on a full filesystem; what it wrote before the failure is read
// at the next open, as after a kill. While the directory is fine but writes
// fail, the database is closed by a goroutine that outlives Close. A write
// or a close that hangs in Badger (a disk that stops answering) hangs that
// goroutine, not Close.
func (s *BadgerStore) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.closeBound)
	defer cancel()
	return s.shutdown(ctx)
}

// finish does Close's work once the store's goroutines have stopped.
func (s *BadgerStore) finish(ctx context.Context) error {
	s.done.Wait()
	retry := time.NewTicker(min(s.cfg.flushEvery, shutdownRetry))
	defer retry.Stop()
	for {
		err := s.flush()
		if s.Health() == nil {
			s.log.flush()
			if s.owned {
				err = errors.Join(err, s.db.Load().Close())
			}
			return err
		}
		select {
		case <-ctx.Done():
		case <-retry.C:
		}
		if ctx.Err() != nil {
			// No flush starts once ctx has ended, so what the last one
			// found decides: a directory gone, read-only or full leaves
			// the database open; failing writes alone close it.
			unsaved := s.unsaved(ctx.Err())
			s.log.flush()
			var dirErr *dirError
			if !errors.As(s.Health(), &dirErr) && s.owned {
				_ = s.db.Load().Close()
			}
			return unsaved
		}
	}
}

// unsaved returns the error of a Close that ended before the store wrote
// what it holds.
func (s *BadgerStore) unsaved(cause error) error {
	lost, _ := s.dir.Load().check()
	windows, benches := 0, 0
	s.memoryStore.each(func(_ keyRef, k *memKey) {
		k.mu.Lock()
		if lost || k.dirty {
			windows++
		}
		if lost && k.benchVer > 0 {
			benches++
		}
		k.mu.Unlock()
	})
	if !lost {
		s.errMu.Lock()
		benches = len(s.unwritten)
		s.errMu.Unlock()
	}
	msg := fmt.Sprintf("keypool: badger store: closing: the windows of %d keys and the benches of %d keys are not saved", windows, benches)
	if err := s.Health(); err != nil {
		return fmt.Errorf("%s (%s): %w", msg, strings.TrimPrefix(err.Error(), "keypool: badger store: "), cause)
	}
	return fmt.Errorf("%s: %w", msg, cause)
}
