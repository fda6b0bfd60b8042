package keypool

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// badgerConfig is a BadgerStore's configuration, set by the options whose
// docs say they configure a BadgerStore; every default lives in
// defaultBadgerConfig.
type badgerConfig struct {
	flushEvery time.Duration
	gcEvery    time.Duration
	closeBound time.Duration // how long Close waits for Shutdown
	logger     *slog.Logger
	syncWrites bool
	tune       func(badger.Options) badger.Options // tests only
}

// badgerCloseTimeout is how long BadgerStore.Close waits for the store to
// write what it holds and close its database.
const badgerCloseTimeout = 15 * time.Second

func defaultBadgerConfig() badgerConfig {
	return badgerConfig{flushEvery: time.Second, gcEvery: 10 * time.Minute, closeBound: badgerCloseTimeout,
		logger: slog.Default()}
}

// newBadgerConfig returns the configuration opts make for a BadgerStore, or
// an error naming each bad option.
func newBadgerConfig(opts []Option) (badgerConfig, error) {
	c, err := newConfig(opts, forBadger)
	return c.badger, err
}

func badgerOption(name string, set func(*badgerConfig) error) Option {
	return option{name: name, scope: forBadger, set: func(c *config) error { return set(&c.badger) }}
}

// WithFlushInterval sets how often a BadgerStore writes windows behind and
// checks its directory; one second by default. It must be positive.
func WithFlushInterval(d time.Duration) Option {
	return badgerOption("WithFlushInterval", func(c *badgerConfig) error {
		if d <= 0 {
			return fmt.Errorf("%v is not positive", d)
		}
		c.flushEvery = d
		return nil
	})
}

// WithBadgerLogger sets where a BadgerStore logs: a failing spell of its
// directory (once when it starts, once when it ends), a record it cannot
// write, and Badger's own warnings and errors, a line repeated within a
// minute counted rather than repeated. Badger's informational logs are
// dropped. The default is slog.Default().
func WithBadgerLogger(l *slog.Logger) Option {
	return badgerOption("WithBadgerLogger", func(c *badgerConfig) error {
		if l != nil {
			c.logger = l
		}
		return nil
	})
}

// WithSyncWrites makes a BadgerStore's writes wait until the operating
// system has put them on the disk (Badger's SyncWrites: an fsync a write).
// Without it a bench is in Badger's memory-mapped files when Bench returns:
// it survives a crash of the process, not one of the operating system or
// the machine. With it, that costs an fsync — about a millisecond on an SSD,
// more on a network disk — in each Bench, and one in each flush of windows.
func WithSyncWrites() Option {
	return badgerOption("WithSyncWrites", func(c *badgerConfig) error {
		c.syncWrites = true
		return nil
	})
}

// withBadgerOptions changes the Badger options OpenBadgerStore uses, after
// the store's own: for tests that need Badger's limits small.
func withBadgerOptions(f func(badger.Options) badger.Options) Option {
	return badgerOption("withBadgerOptions", func(c *badgerConfig) error {
		c.tune = f
		return nil
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
