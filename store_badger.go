package keypool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// ErrStoreLocked reports that a state directory is held by another process
// (or by another store in this one): Badger lets one owner open a directory
// at a time. Test for it with errors.Is.
var ErrStoreLocked = errors.New("state directory is held by another process")

// BadgerStore keeps a pool's state in memory, as a MemoryStore does, and in a
// Badger database, so that a restart — or a kill -9 — resumes with the
// windows and benches. Benches and escalation levels are written through:
// a bench is on disk when Bench returns. Windows are written behind, in one
// batch about once a second (WithFlushInterval) and at Flush and Close, so
// the hot path never waits on disk. Opening the store loads what it holds;
// state that has expired is dropped.
//
// Badger itself starts root spans named "Badger.Compaction" and "Badger.GC"
// through the global OpenTelemetry tracer provider; filter them by name in a
// sampler if they are unwanted. Its logs go to slog at warning level and
// above.
//
// A BadgerStore is safe for concurrent use. One process can open a
// directory once: share the store between pools rather than opening it
// twice.
type BadgerStore struct {
	mem   *MemoryStore
	db    *badger.DB
	owned bool // Close closes db
	cfg   badgerConfig

	stop chan struct{}
	done sync.WaitGroup

	// flushMu serializes flushes: the flusher's and those of Flush and
	// Close.
	flushMu sync.Mutex
	// errMu guards failing and unwritten.
	errMu     sync.Mutex
	failing   bool              // the last write failed and was reported
	unwritten map[keyRef]uint64 // keys whose benches failed to be written, and the version that failed
	closeMu   sync.Mutex
	closed    bool

	// update and flushBatch write to the database: db.Update and
	// WriteBatch.Flush, which tests replace to make writes fail.
	update     func(func(*badger.Txn) error) error
	flushBatch func(*badger.WriteBatch) error
}

var _ Store = (*BadgerStore)(nil)

// badgerConfig is a BadgerStore's configuration.
type badgerConfig struct {
	flushEvery time.Duration
	gcEvery    time.Duration
	logger     *slog.Logger
	onError    func(error)
	tune       func(badger.Options) badger.Options
}

// A BadgerOption configures a BadgerStore.
type BadgerOption func(*badgerConfig)

// WithFlushInterval sets how often windows are written behind, one second by
// default.
func WithFlushInterval(d time.Duration) BadgerOption {
	return func(c *badgerConfig) {
		if d > 0 {
			c.flushEvery = d
		}
	}
}

// WithGCInterval sets how often Badger's value log is garbage-collected, ten
// minutes by default.
func WithGCInterval(d time.Duration) BadgerOption {
	return func(c *badgerConfig) {
		if d > 0 {
			c.gcEvery = d
		}
	}
}

// WithBadgerLogger sets where Badger's warnings and errors go; the default
// is slog.Default(). Badger's informational logs are dropped.
func WithBadgerLogger(l *slog.Logger) BadgerOption {
	return func(c *badgerConfig) {
		if l != nil {
			c.logger = l
		}
	}
}

// WithStoreErrors sets a function told when a write fails — windows written
// behind or benches written through — once until a write succeeds again; the
// store keeps serving from memory and writes everything at the next flush
// that succeeds. By default the failure is logged with the store's logger.
func WithStoreErrors(f func(error)) BadgerOption {
	return func(c *badgerConfig) {
		if f != nil {
			c.onError = f
		}
	}
}

// WithBadgerOptions lets the caller change the Badger options that
// OpenBadgerStore uses, after the store's own small-memory profile is set.
func WithBadgerOptions(f func(badger.Options) badger.Options) BadgerOption {
	return func(c *badgerConfig) {
		if f != nil {
			c.tune = f
		}
	}
}

func newBadgerConfig(opts []BadgerOption) badgerConfig {
	c := badgerConfig{flushEvery: time.Second, gcEvery: 10 * time.Minute, logger: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.onError == nil {
		l := c.logger
		c.onError = func(err error) { l.Warn("keypool: writing state", "err", err) }
	}
	return c
}

// badgerOptions returns the Badger options of a small state store: our state
// is a few hundred bytes a key, so small memtables, no block cache (which
// needs compression off) and small value-log files keep the resident memory
// near 10 MiB instead of Badger's default of hundreds.
func badgerOptions(dir string, c badgerConfig) badger.Options {
	o := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{c.logger}).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(0).
		WithCompression(options.None).
		WithValueLogFileSize(16 << 20).
		WithNumCompactors(2).
		WithMetricsEnabled(false)
	if c.tune != nil {
		o = c.tune(o)
	}
	return o
}

// OpenBadgerStore opens (creating if needed) a Badger database in dir and
// returns a store over it that loads what it holds. A directory held by
// another process gives an error that errors.Is reports as ErrStoreLocked;
// one that cannot be written or is not a Badger database gives an error
// naming it. Close closes the database.
func OpenBadgerStore(dir string, opts ...BadgerOption) (s *BadgerStore, err error) {
	if dir == "" {
		return nil, errors.New("keypool: badger store: no directory")
	}
	cfg := newBadgerConfig(opts)
	db, err := openBadger(badgerOptions(dir, cfg))
	if err != nil {
		if isBadgerLocked(err) {
			return nil, fmt.Errorf("keypool: badger store %s: %w", dir, ErrStoreLocked)
		}
		return nil, fmt.Errorf("keypool: badger store %s: %w", dir, err)
	}
	s, err = newBadgerStore(db, true, cfg)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("keypool: badger store %s: %w", dir, err)
	}
	return s, nil
}

// NewBadgerStore returns a store over a Badger database the caller opened
// and owns: Close stops the store but leaves db open. The store's records
// are under keys that start with "kp1/".
func NewBadgerStore(db *badger.DB, opts ...BadgerOption) (*BadgerStore, error) {
	if db == nil {
		return nil, errors.New("keypool: badger store: nil database")
	}
	s, err := newBadgerStore(db, false, newBadgerConfig(opts))
	if err != nil {
		return nil, fmt.Errorf("keypool: badger store: %w", err)
	}
	return s, nil
}

// openBadger opens a database, turning a panic inside Badger (it panics on
// some bad options and damaged files) into an error.
func openBadger(o badger.Options) (db *badger.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("badger: %v", r)
		}
	}()
	return badger.Open(o)
}

// isBadgerLocked reports whether err is Badger's refusal to open a directory
// another owner holds. Badger formats the cause into its message rather than
// wrapping it, so its text is the only sign.
func isBadgerLocked(err error) bool {
	return strings.Contains(err.Error(), "Another process is using this Badger database")
}

func newBadgerStore(db *badger.DB, owned bool, cfg badgerConfig) (*BadgerStore, error) {
	s := &BadgerStore{mem: NewMemoryStore(), db: db, owned: owned, cfg: cfg, stop: make(chan struct{}),
		unwritten: map[keyRef]uint64{}, update: db.Update, flushBatch: (*badger.WriteBatch).Flush}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.done.Add(2)
	go s.every(s.cfg.flushEvery, s.flush)
	go s.every(s.cfg.gcEvery, s.collect)
	return s, nil
}

// The record keys: a prefix, then the provider and the key ID.
var (
	windowsPrefix = []byte("kp1/w/")
	benchesPrefix = []byte("kp1/b/")
)

func recordKey(prefix []byte, ref keyRef) []byte {
	b := make([]byte, 0, len(prefix)+len(ref.provider)+1+len(ref.keyID))
	b = append(b, prefix...)
	b = append(b, ref.provider...)
	b = append(b, 0)
	return append(b, ref.keyID...)
}

func parseRecordKey(k []byte) (keyRef, bool) {
	provider, keyID, ok := bytes.Cut(k[len(windowsPrefix):], []byte{0})
	return keyRef{string(provider), string(keyID)}, ok
}

// load reads every record into memory.
func (s *BadgerStore) load() error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for _, prefix := range [][]byte{windowsPrefix, benchesPrefix} {
			for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
				item := it.Item()
				ref, ok := parseRecordKey(item.Key())
				if !ok {
					continue
				}
				err := item.Value(func(v []byte) error {
					k := s.mem.key(ref.provider, ref.keyID)
					k.mu.Lock()
					defer k.mu.Unlock()
					if bytes.Equal(prefix, windowsPrefix) {
						return k.decodeWindows(v)
					}
					return k.decodeBenches(v)
				})
				if err != nil {
					return fmt.Errorf("record %q: %w", item.Key(), err)
				}
			}
		}
		return nil
	})
}

// Take implements Store.
func (s *BadgerStore) Take(ctx context.Context, c Claim) (Grant, error) { return s.mem.Take(ctx, c) }

// State implements Store.
func (s *BadgerStore) State(ctx context.Context, provider, keyID string, now time.Time) (KeyStats, error) {
	return s.mem.State(ctx, provider, keyID, now)
}

// Bench implements Store: the bench, or the level, is written through.
func (s *BadgerStore) Bench(ctx context.Context, b Bench) error {
	if err := s.mem.Bench(ctx, b); err != nil {
		return err
	}
	return s.writeBenches(keyRef{b.Provider, b.KeyID})
}

// Unbench implements Store: the change is written through.
func (s *BadgerStore) Unbench(ctx context.Context, provider, keyID string) error {
	_ = s.mem.Unbench(ctx, provider, keyID)
	return s.writeBenches(keyRef{provider, keyID})
}

// benchesLife is how long a benches record outlives its last bench, by the
// wall clock Badger expires records by: escalation levels outlast benches.
const benchesLife = 24 * time.Hour

// writeBenches writes a key's benches and levels. Writes of one key may race;
// each carries the key's bench version, and an older version never replaces
// a newer one. A failed write is reported, and made again at the next flush.
func (s *BadgerStore) writeBenches(ref keyRef) error {
	k := s.mem.key(ref.provider, ref.keyID)
	k.mu.Lock()
	val := k.encodeBenches(nil)
	ver := k.benchVer
	until := k.bench.until
	for _, m := range k.models {
		until = max(until, m.bench.until)
	}
	k.mu.Unlock()
	life := max(time.Until(time.Unix(0, until)), 0) + benchesLife
	key := recordKey(benchesPrefix, ref)
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
	var err error
	for range 3 {
		if err = s.update(write); !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	s.errMu.Lock()
	if err != nil {
		err = fmt.Errorf("keypool: writing bench of %s: %w", ref.keyID, err)
		s.unwritten[ref] = max(s.unwritten[ref], ver)
	} else if s.unwritten[ref] <= ver {
		// An older version written does not make up for a newer one that
		// failed.
		delete(s.unwritten, ref)
	}
	s.errMu.Unlock()
	if !errors.Is(err, badger.ErrConflict) {
		// Losing every try to other writers of the key is no failure of
		// the store: the next flush writes the benches.
		s.report(err)
	}
	return err
}

// windowsLife is how long a windows record lives after it was written: the
// longest window is a day.
const windowsLife = 48 * time.Hour

// Flush implements Store: it writes the windows that changed since the last
// flush, and the benches whose writes failed.
func (s *BadgerStore) Flush(context.Context) error {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	var written []*memKey
	var err error
	s.mem.each(func(ref keyRef, k *memKey) {
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
		written = append(written, k)
		err = wb.SetEntry(badger.NewEntry(recordKey(windowsPrefix, ref), val).WithTTL(windowsLife))
	})
	if err == nil {
		err = s.flushBatch(wb)
	}
	if err != nil {
		// Nothing is lost: the keys are written again at the next flush.
		for _, k := range written {
			k.mu.Lock()
			k.dirty = true
			k.mu.Unlock()
		}
		err = fmt.Errorf("keypool: writing windows: %w", err)
		s.report(err)
		return err
	}
	s.errMu.Lock()
	refs := make([]keyRef, 0, len(s.unwritten))
	for ref := range s.unwritten {
		refs = append(refs, ref)
	}
	s.errMu.Unlock()
	for _, ref := range refs {
		if err = s.writeBenches(ref); err != nil {
			return err
		}
	}
	s.report(nil)
	return nil
}

// report tells the error handler of a failed write, once until a write
// succeeds.
func (s *BadgerStore) report(err error) {
	s.errMu.Lock()
	tell := err != nil && !s.failing
	s.failing = err != nil
	s.errMu.Unlock()
	if tell {
		s.cfg.onError(err)
	}
}

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

// flush writes windows behind.
func (s *BadgerStore) flush() { _ = s.Flush(context.Background()) }

// collect garbage-collects Badger's value log.
func (s *BadgerStore) collect() {
	for s.db.RunValueLogGC(0.5) == nil {
	}
}

// Close stops the store's goroutines, writes what is left, and closes the
// database if the store opened it. A second Close does nothing.
func (s *BadgerStore) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	close(s.stop)
	s.done.Wait()
	err := s.Flush(context.Background())
	if s.owned {
		err = errors.Join(err, s.db.Close())
	}
	return err
}

// badgerLogger sends Badger's warnings and errors to slog and drops the rest.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, v ...any) {
	b.l.Error("badger: " + strings.TrimSpace(fmt.Sprintf(f, v...)))
}

func (b badgerLogger) Warningf(f string, v ...any) {
	b.l.Warn("badger: " + strings.TrimSpace(fmt.Sprintf(f, v...)))
}

func (badgerLogger) Infof(string, ...any)  {}
func (badgerLogger) Debugf(string, ...any) {}

// Keys yields the provider and ID of each key the store holds state for,
// in no particular order.
func (s *BadgerStore) Keys() iter.Seq2[string, string] {
	return func(yield func(provider, keyID string) bool) {
		s.mem.keys.Range(func(ref, _ any) bool {
			r := ref.(keyRef)
			return yield(r.provider, r.keyID)
		})
	}
}
