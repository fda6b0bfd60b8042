package keypool

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/dgraph-io/badger/v4"
)

// recordLayout is where one kind of record lives in the database.
type recordLayout struct {
	prefix  []byte
	benches bool
	legacy  bool // the kp1 layout, read and replaced
}

// recordLayouts in the order load reads them: the kp1 layout first, so that
// when a key has records of both layouts, the kp2 one is what stays.
var recordLayouts = []recordLayout{
	{prefix: legacyWindowsPrefix, legacy: true},
	{prefix: legacyBenchesPrefix, benches: true, legacy: true},
	{prefix: windowsPrefix},
	{prefix: benchesPrefix, benches: true},
}

// load reads every record into memory and returns the keys of the records
// of the kp1 layout, to be replaced. A record that cannot be read — its key
// or its value — is dropped, and a kp1 record whose key more than one pair
// could have written (a NUL in a provider or a key ID) too: one warning
// counts each kind. Either way, those keys start afresh. Only a failure of
// the database itself fails the load.
func (s *BadgerStore) load(db *badger.DB) (legacy [][]byte, err error) {
	var dropped droppedRecords
	replaced := map[keyRef]bool{}
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for _, l := range recordLayouts {
			for it.Seek(l.prefix); it.ValidForPrefix(l.prefix); it.Next() {
				item := it.Item()
				var ref keyRef
				var ok bool
				if l.legacy {
					legacy = append(legacy, item.KeyCopy(nil))
					if ref, ok = parseLegacyRecordKey(l.prefix, item.Key()); !ok {
						dropped.ambiguous++
						continue
					}
					replaced[ref] = true
				} else if ref, ok = parseRecordKey(l.prefix, item.Key()); !ok {
					dropped.unreadable(fmt.Errorf("record key %q: %w", item.Key(), errShortRecord))
					continue
				}
				var bad error
				if err := item.Value(func(v []byte) error {
					bad = s.loadRecord(ref, l.benches, v)
					return nil
				}); err != nil {
					return fmt.Errorf("record of key %s: %w", keyName(ref), err)
				}
				if bad != nil {
					dropped.unreadable(fmt.Errorf("%s of key %s: %w", recordRef{ref, l.benches}, keyName(ref), bad))
				}
			}
		}
		return nil
	})
	if err == nil {
		err = s.loadDisabled(db, &dropped)
	}
	if err != nil {
		return nil, err
	}
	dropped.warn(s.cfg.logger)
	for ref := range replaced {
		k := s.memoryStore.key(ref.provider, ref.keyID)
		k.mu.Lock()
		k.dirty = true
		ver := k.benchVer
		k.mu.Unlock()
		if ver > 0 {
			s.unwritten[ref] = ver
		}
	}
	return legacy, nil
}

// loadDisabled reads the keys out of rotation. A record that cannot be
// read keeps its key out, by unreadableBy, with a warning.
func (s *BadgerStore) loadDisabled(db *badger.DB, dropped *droppedRecords) error {
	return db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Seek(disabledPrefix); it.ValidForPrefix(disabledPrefix); it.Next() {
			item := it.Item()
			ref, ok := parseRecordKey(disabledPrefix, item.Key())
			if !ok {
				dropped.unreadable(fmt.Errorf("record key %q: %w", item.Key(), errShortRecord))
				continue
			}
			var d Disabled
			var bad error
			if err := item.Value(func(v []byte) error {
				d, bad = decodeDisabled(v)
				return nil
			}); err != nil {
				return fmt.Errorf("disabled record of key %s: %w", keyName(ref), err)
			}
			if bad != nil {
				// The key stays out, as whoever wrote the record meant.
				s.cfg.logger.Warn("keypool: badger store: the record of a disabled key cannot be read; it stays out of rotation until enabled",
					"key", keyName(ref), "err", bad)
				d = Disabled{By: unreadableBy}
			}
			_ = s.memoryStore.SetDisabled(context.Background(), ref.provider, ref.keyID, &d)
		}
		return nil
	})
}

// droppedRecords counts the records a load dropped, by kind: one warning
// each kind, however many.
type droppedRecords struct {
	ambiguous int   // kp1 records whose key more than one pair could have written
	unread    int   // records whose key or value cannot be read
	first     error // the first of those
}

func (d *droppedRecords) unreadable(err error) {
	if d.unread++; d.first == nil {
		d.first = err
	}
}

func (d *droppedRecords) warn(logger *slog.Logger) {
	if d.ambiguous > 0 {
		logger.Warn("keypool: badger store: dropped records of the kp1 layout whose key more than one provider and key ID could have written (a NUL in a name); those keys start afresh",
			"records", d.ambiguous)
	}
	if d.unread > 0 {
		logger.Warn("keypool: badger store: dropped records that cannot be read; those keys start afresh",
			"records", d.unread, "first", d.first)
	}
}

// loadRecord reads a record into its key's state. A record that cannot be
// read changes nothing.
func (s *BadgerStore) loadRecord(ref keyRef, benches bool, v []byte) error {
	read := &memKey{models: map[string]*memModel{}}
	if benches {
		if err := read.decodeBenches(v); err != nil {
			return err
		}
	} else if err := read.decodeWindows(v); err != nil {
		return err
	}
	k := s.memoryStore.key(ref.provider, ref.keyID)
	k.mu.Lock()
	defer k.mu.Unlock()
	if benches {
		k.benchVer = max(k.benchVer, read.benchVer)
		k.bench = read.bench
		for name, m := range read.models {
			km := k.model(name, k.last, true)
			km.bench, km.level = m.bench, m.level
		}
		return nil
	}
	k.last, k.cap, k.spend = read.last, read.cap, read.spend
	for name, m := range read.models {
		km := k.model(name, k.last, true)
		km.win, km.learned = m.win, m.learned
	}
	return nil
}

// replaceLegacy writes the records read from the kp1 layout under kp2 and
// deletes the kp1 records. When the write fails, the kp1 records stay, to be
// read again at the next open.
func (s *BadgerStore) replaceLegacy(legacy [][]byte) {
	if len(legacy) == 0 {
		return
	}
	if _ = s.flush(); s.Health() != nil {
		return
	}
	wb := s.db.Load().NewWriteBatch()
	defer wb.Cancel()
	for _, k := range legacy {
		if wb.Delete(k) != nil {
			return
		}
	}
	_ = s.flushBatch(wb)
}
