package keypool

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// A BadgerOption configures a BadgerStore. Options that take a function or a
// logger ignore nil, keeping the default; any other bad value is an error
// from OpenBadgerStore or NewBadgerStore naming it.
type BadgerOption interface {
	applyBadger(*badgerConfig)
}

type badgerOptionFunc func(*badgerConfig)

func (f badgerOptionFunc) applyBadger(c *badgerConfig) { f(c) }

// badgerConfig is a BadgerStore's configuration: every default lives in
// newBadgerConfig.
type badgerConfig struct {
	flushEvery time.Duration
	gcEvery    time.Duration
	closeBound time.Duration // how long Close waits for Shutdown
	logger     *slog.Logger
	syncWrites bool
	tune       func(badger.Options) badger.Options

	errs []error // from options, reported by OpenBadgerStore and NewBadgerStore
}

// badgerCloseTimeout is how long BadgerStore.Close waits for the store to
// write what it holds and close its database.
const badgerCloseTimeout = 15 * time.Second

func newBadgerConfig(opts []BadgerOption) badgerConfig {
	c := badgerConfig{flushEvery: time.Second, gcEvery: 10 * time.Minute, closeBound: badgerCloseTimeout,
		logger: slog.Default()}
	for _, o := range opts {
		if o != nil {
			o.applyBadger(&c)
		}
	}
	return c
}

// positive adds an error naming the option to c when d is not positive.
func (c *badgerConfig) positive(option string, d time.Duration) bool {
	if d <= 0 {
		c.errs = append(c.errs, fmt.Errorf("%s(%v): must be positive", option, d))
		return false
	}
	return true
}

// WithFlushInterval sets how often the BadgerStore writes windows behind and
// checks its directory; one second by default. It must be positive.
func WithFlushInterval(d time.Duration) BadgerOption {
	return badgerOptionFunc(func(c *badgerConfig) {
		if c.positive("WithFlushInterval", d) {
			c.flushEvery = d
		}
	})
}

// WithGCInterval sets how often the BadgerStore garbage-collects Badger's
// value log; ten minutes by default. It must be positive.
func WithGCInterval(d time.Duration) BadgerOption {
	return badgerOptionFunc(func(c *badgerConfig) {
		if c.positive("WithGCInterval", d) {
			c.gcEvery = d
		}
	})
}

// WithBadgerLogger sets where the BadgerStore logs: a failing spell of its
// directory (once when it starts, once when it ends), a record it cannot
// write, and Badger's own warnings and errors, a line repeated within a
// minute counted rather than repeated. Badger's informational logs are
// dropped. The default is slog.Default().
func WithBadgerLogger(l *slog.Logger) BadgerOption {
	return badgerOptionFunc(func(c *badgerConfig) {
		if l != nil {
			c.logger = l
		}
	})
}

// WithSyncWrites makes the BadgerStore's writes wait until the operating
// system has put them on the disk (Badger's SyncWrites: an fsync a write).
// Without it a bench is in Badger's memory-mapped files when Bench returns:
// it survives a crash of the process, not one of the operating system or
// the machine. With it, that costs an fsync — about a millisecond on an SSD,
// more on a network disk — in each Bench, and one in each flush of windows.
// OpenBadgerStore only: with NewBadgerStore the database's own options rule.
func WithSyncWrites() BadgerOption {
	return badgerOptionFunc(func(c *badgerConfig) { c.syncWrites = true })
}

// WithBadgerOptions lets the caller change the Badger options that
// OpenBadgerStore uses, after the BadgerStore's own small-memory profile
// (and WithSyncWrites) is set.
func WithBadgerOptions(f func(badger.Options) badger.Options) BadgerOption {
	return badgerOptionFunc(func(c *badgerConfig) {
		if f != nil {
			c.tune = f
		}
	})
}

// badgerOptions returns the Badger options of a small state store: our state
// is a few hundred bytes a key, so small memtables, no block cache (which
// needs compression off) and small value-log files keep the resident memory
// near 10 MiB instead of Badger's default of hundreds.
func badgerOptions(dir string, c badgerConfig, log *badgerLogger) badger.Options {
	o := badger.DefaultOptions(dir).
		WithLogger(log).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(0).
		WithCompression(options.None).
		WithValueLogFileSize(16 << 20).
		WithNumCompactors(2).
		WithMetricsEnabled(false).
		WithSyncWrites(c.syncWrites)
	if c.tune != nil {
		o = c.tune(o)
	}
	return o
}
