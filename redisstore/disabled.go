package redisstore

import (
	"maps"
	"sync"

	"github.com/keypool-go/keypool"
)

// disabledKeys is what a store knows of the keys out of rotation: by
// provider, what Redis last said with the changes made since, and the
// changes made while Redis was down, to write when it answers — the latest
// of each key, bounded by the keys, never dropped.
type disabledKeys struct {
	mu      sync.Mutex
	last    map[string]map[string]keypool.Disabled // provider → key ID → record
	pending map[keyRef]*keypool.Disabled           // nil: put back
}

// set records a change of a key; pending, one Redis has not yet.
func (k *disabledKeys) set(provider, keyID string, d *keypool.Disabled, pending bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if m, ok := k.last[provider]; ok {
		if d == nil {
			delete(m, keyID)
		} else {
			m[keyID] = *d
		}
	}
	ref := keyRef{provider, keyID}
	switch {
	case pending:
		if k.pending == nil {
			k.pending = map[keyRef]*keypool.Disabled{}
		}
		k.pending[ref] = d
	default:
		delete(k.pending, ref) // a later change, written, replaces it
	}
}

// read records what Redis said of provider's keys: the changes still
// pending are applied over it.
func (k *disabledKeys) read(provider string, m map[string]keypool.Disabled) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last == nil {
		k.last = map[string]map[string]keypool.Disabled{}
	}
	own := maps.Clone(m)
	for ref, d := range k.pending {
		if ref.provider != provider {
			continue
		}
		if d == nil {
			delete(own, ref.keyID)
		} else {
			own[ref.keyID] = *d
		}
	}
	k.last[provider] = own
}

// known returns a copy of what the store knows of provider's keys, and
// whether it has read them from Redis.
func (k *disabledKeys) known(provider string) (map[string]keypool.Disabled, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.last[provider]
	return maps.Clone(m), ok
}

// pendingOf returns provider's changes not yet written.
func (k *disabledKeys) pendingOf(provider string) map[string]*keypool.Disabled {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out map[string]*keypool.Disabled
	for ref, d := range k.pending {
		if ref.provider == provider {
			if out == nil {
				out = map[string]*keypool.Disabled{}
			}
			out[ref.keyID] = d
		}
	}
	return out
}

// written records that a pending change reached Redis, unless a later one
// took its place meanwhile.
func (k *disabledKeys) written(provider, keyID string, d *keypool.Disabled) {
	k.mu.Lock()
	defer k.mu.Unlock()
	ref := keyRef{provider, keyID}
	if cur, ok := k.pending[ref]; ok && cur == d {
		delete(k.pending, ref)
	}
}
