package keypool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dgraph-io/badger/v4"
)

// badgerLockFile is the file Badger writes its process ID to in a directory
// it opened, and removes when it closes it. Its lasting as the store found
// it tells that the database's files are still there.
const badgerLockFile = "LOCK"

// stateDir is the directory a BadgerStore's database lives in, as the store
// found it when it opened the database. The store checks it before each
// flush and each bench it writes through, and writes nothing while the
// directory is gone, read-only or full: Badger's writes into a directory
// that is gone go to files nobody will read again, and a memory-mapped
// write into a full filesystem kills the process (SIGBUS; Badger issues
// #1682 and #1801). A stateDir is never changed: the store replaces it.
type stateDir struct {
	path    string
	dir     os.FileInfo // the directory
	lock    os.FileInfo // Badger's LOCK file in it; nil when there was none
	reserve uint64      // the free bytes below which the filesystem counts as full
}

// newStateDir returns the state directory of a database opened with o, or
// nil for a database that keeps no files.
func newStateDir(o badger.Options) (*stateDir, error) {
	if o.InMemory || o.Dir == "" {
		return nil, nil
	}
	fi, err := os.Stat(o.Dir)
	if err != nil {
		return nil, err
	}
	d := &stateDir{path: o.Dir, dir: fi, reserve: reserveFor(o)}
	if lock, err := os.Stat(filepath.Join(o.Dir, badgerLockFile)); err == nil {
		d.lock = lock
	}
	return d, nil
}

// reserveFor returns the free space a database opened with o needs to write
// its next files: a memtable flushed to a table, the next memtable's
// write-ahead log, and a compaction of the two.
func reserveFor(o badger.Options) uint64 { return 3 * uint64(max(o.MemTableSize, 0)) }

// dirError is a failing check of the state directory.
type dirError struct{ err error }

func (e *dirError) Error() string { return e.err.Error() }
func (e *dirError) Unwrap() error { return e.err }

// check returns what keeps the store from writing to d, if anything, as a
// *dirError; lost reports that the database's files are gone: the
// directory was removed, emptied or replaced.
func (d *stateDir) check() (lost bool, err error) {
	if d == nil {
		return false, nil
	}
	fi, err := os.Stat(d.path)
	switch {
	case err != nil:
		return true, &dirError{fmt.Errorf("state directory is gone: %w", err)}
	case !os.SameFile(fi, d.dir):
		return true, &dirError{fmt.Errorf("state directory %s was removed and made again: the database's files are gone", d.path)}
	}
	if d.lock != nil {
		if fi, err := os.Stat(filepath.Join(d.path, badgerLockFile)); err != nil || !os.SameFile(fi, d.lock) {
			return true, &dirError{fmt.Errorf("state directory %s was emptied: the database's files are gone", d.path)}
		}
	}
	if err := d.usable(); err != nil {
		return false, &dirError{err}
	}
	return false, nil
}

// usable returns an error when the directory cannot be written to or has
// less than the reserve free.
func (d *stateDir) usable() error {
	if err := dirWritable(d.path); err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", d.path, err)
	}
	if free, ok := freeBytes(d.path); ok && free < d.reserve {
		return fmt.Errorf("state directory %s has %s free, less than the %s the store keeps in reserve: %w",
			d.path, mib(free), mib(d.reserve), syscall.ENOSPC)
	}
	return nil
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// openBadgerDir opens the database in dir with o, making the directory if
// needed. It refuses a filesystem with less than the reserve free, and
// first removes the empty memtable and value-log files a kill can leave.
func openBadgerDir(o badger.Options, log *badgerLogger) (*badger.DB, error) {
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	if free, ok := freeBytes(o.Dir); ok && free < reserveFor(o) {
		return nil, fmt.Errorf("%s free, less than the %s the store keeps in reserve: %w",
			mib(free), mib(reserveFor(o)), syscall.ENOSPC)
	}
	removeEmptyFiles(o.Dir, log)
	return openBadger(o)
}

// removeEmptyFiles removes the empty memtable (.mem) and value-log (.vlog)
// files in dir, each with a warning. A process killed between creating such
// a file and sizing it leaves it empty, and Badger then refuses to open the
// directory once ("z.NewFile"; Badger issue #2207). An empty file holds
// nothing. It does so only while holding the directory's lock, as Badger
// takes it: a file another process is creating is never removed.
func removeEmptyFiles(dir string, log *badgerLogger) {
	withDirLock(dir, func() {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return
		}
		for _, e := range entries {
			name := e.Name()
			if !e.Type().IsRegular() || !(strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")) {
				continue
			}
			if fi, err := e.Info(); err != nil || fi.Size() != 0 {
				continue
			}
			err := os.Remove(filepath.Join(dir, name))
			log.l.Warn("keypool: badger store: removed an empty file a killed process left (Badger issue #2207)",
				"dir", dir, "file", name, "err", err)
		}
	})
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

// badgerMaxKeySize is the longest key Badger takes (txn.go, Txn.modify).
const badgerMaxKeySize = 65000

// badgerLimits are the sizes past which Badger refuses an entry.
type badgerLimits struct{ value, batch, threshold int64 }

func limitsOf(o badger.Options) badgerLimits {
	// A transaction takes at most 15% of a memtable (db.go, Open).
	return badgerLimits{value: o.ValueLogFileSize, batch: 15 * o.MemTableSize / 100, threshold: o.ValueThreshold}
}

// errRecordTooLarge reports a record Badger would refuse.
var errRecordTooLarge = errors.New("over Badger's limit")

// check returns an error when Badger would refuse the entry key → val, as
// Txn.modify does (the key's and the value's limits) or as a transaction
// does (an entry larger than a whole transaction). A database kept in
// memory refuses more (values over its value threshold, which its Opts no
// longer show); the store learns of those from Badger.
func (l badgerLimits) check(key, val []byte) error {
	switch {
	case len(key) > badgerMaxKeySize:
		return fmt.Errorf("its record key of %d bytes is %w of %d", len(key), errRecordTooLarge, badgerMaxKeySize)
	case int64(len(val)) > l.value:
		return fmt.Errorf("its record of %d bytes is %w of %d (the value-log file size)", len(val), errRecordTooLarge, l.value)
	}
	// Badger's estimate (Txn.checkSize), from an empty transaction (its own
	// entry, "!badger!txn" and 10 bytes): the key, its version (10 bytes),
	// the meta bytes (2), and the value unless it goes to the value log (a
	// pointer of 12 bytes instead).
	size := int64(len("!badger!txn")+10) + int64(len(key)) + 10 + 2
	if int64(len(val)) < l.threshold {
		size += int64(len(val))
	} else {
		size += 12
	}
	if size >= l.batch {
		return fmt.Errorf("its record of %d bytes is %w of %d for a transaction", size, errRecordTooLarge, l.batch)
	}
	return nil
}
