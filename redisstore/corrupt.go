package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/keypool-go/keypool"
)

// A Redis key of a pool's key that holds the wrong type — a string or a
// list where the store keeps a hash, written by hand or by another
// program — makes every script that touches it fail with WRONGTYPE. A
// take of that key is then refused, not failed: the pool passes the key
// over and serves the request from another, and Health names the key and
// the Redis key until a take of it succeeds again (the Redis key deleted,
// or expired).

// passOverRetry is when a key passed over for a Redis key of the wrong
// type may be asked again, from the take's time.
const passOverRetry = time.Second

// keyRef names a pool's key.
type keyRef struct{ provider, keyID string }

// wrongType reports whether err is Redis's answer that a command met a key
// of the wrong type.
func wrongType(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.Contains(err.Error(), "WRONGTYPE")
}

// passOver refuses take t, whose script met a key of the wrong type
// (cause), and records why for Health: the first time, it asks Redis
// which of the take's keys holds what.
func (s *Store) passOver(ctx context.Context, t keypool.Claim, keys []string, cause error) keypool.Grant {
	ref := keyRef{t.Provider, t.KeyID}
	s.mu.Lock()
	_, known := s.corrupt[ref]
	s.mu.Unlock()
	if !known {
		err := s.whichWrongType(ctx, ref, keys, cause)
		s.mu.Lock()
		if s.corrupt == nil {
			s.corrupt = map[keyRef]error{}
		}
		s.corrupt[ref] = err
		s.mu.Unlock()
		s.cfg.logger.Warn("redisstore: key passed over", "err", err)
	}
	return keypool.Grant{RetryAt: t.Now.Add(passOverRetry), Reason: keypool.KindTransient}
}

// whichWrongType returns the error that names the keys among keys that
// hold another type than the store's hashes.
func (s *Store) whichWrongType(ctx context.Context, ref keyRef, keys []string, cause error) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	keys = slices.Compact(slices.Sorted(slices.Values(keys)))
	types := make([]*redis.StatusCmd, len(keys))
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			types[i] = p.Type(ctx, k)
		}
		return nil
	})
	var bad []string
	for i, k := range keys {
		if v, err := types[i].Result(); err == nil && v != "hash" && v != "none" {
			bad = append(bad, fmt.Sprintf("%s is a %s", k, v))
		}
	}
	what := strings.Join(bad, ", ")
	if what == "" {
		what = cause.Error()
	}
	return fmt.Errorf("redisstore: key %q of %q passed over: %s, not a hash", ref.keyID, ref.provider, what)
}

// sound records that a take of a key succeeded: it is no longer passed
// over.
func (s *Store) sound(provider, keyID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.corrupt) != 0 {
		delete(s.corrupt, keyRef{provider, keyID})
	}
}

// corruption returns the errors of the keys passed over, in a stable
// order, or nil. s.mu must be held.
func (s *Store) corruption() error {
	if len(s.corrupt) == 0 {
		return nil
	}
	refs := slices.SortedFunc(maps.Keys(s.corrupt), func(a, b keyRef) int {
		return cmp.Or(cmp.Compare(a.provider, b.provider), cmp.Compare(a.keyID, b.keyID))
	})
	errs := make([]error, len(refs))
	for i, r := range refs {
		errs[i] = s.corrupt[r]
	}
	return errors.Join(errs...)
}
