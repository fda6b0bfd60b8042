package keypool

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"
)

// KeyStats is what is known of one key: what its store holds (its benches,
// levels and usage) and, from Pool.Stats, what its pool saw (requests sent,
// answers by kind, the vendor's last reading).
type KeyStats struct {
	ID   string
	Paid bool
	// Bench is the bench that holds the key for every model; zero when
	// none does.
	Bench BenchState
	// Cap is what the key has used across its models.
	Cap Usage
	// Models holds the key's state per model, sorted by model name in
	// Pool.Stats and in no particular order from a Store.
	Models []ModelStats
	// Sent counts the requests sent with the key; Answers counts their
	// answers by kind (KindNone for successes and other answers that bench
	// nothing).
	Sent    int64
	Answers map[Kind]int64
	// Last is what the vendor last said of the key's windows (how full,
	// when it resets), at LastAt; zero when it has said nothing.
	Last   Reading
	LastAt time.Time
}

// ModelStats is what is known of one key for one model.
type ModelStats struct {
	Model string
	// Limits are the key's limits for the model; a Store leaves them zero.
	Limits Limits
	Bench  BenchState
	// Level is the number of quota answers without a date since the key's
	// last success for the model.
	Level int
	Usage Usage
}

// statsTimeout bounds the store calls of Stats, which takes no context.
const statsTimeout = 5 * time.Second

// Stats returns what the pool knows of each key, in the order the keys were
// given. It asks the store, each call bounded by a few seconds, and leaves
// out what a failing store cannot say. A zero Pool has no stats.
func (p *Pool) Stats() []KeyStats {
	if p.usable() == errNotNew {
		return nil
	}
	now := p.cfg.clock()
	out := make([]KeyStats, 0, len(p.keys))
	for _, k := range p.keys {
		ks := KeyStats{Sent: k.sent.Load(), Answers: map[Kind]int64{}}
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		if st, err := p.store.State(ctx, p.provider, k.ID, now); err == nil {
			ks.Bench, ks.Cap, ks.Models = st.Bench, st.Cap, st.Models
			for i := range ks.Models {
				ks.Models[i].Limits = p.limits(k, ks.Models[i].Model)
			}
			slices.SortFunc(ks.Models, func(a, b ModelStats) int { return cmp.Compare(a.Model, b.Model) })
		}
		cancel()
		ks.ID, ks.Paid = k.ID, k.Paid
		k.lastMu.Lock()
		ks.Last, ks.LastAt = k.last, k.lastAt
		k.lastMu.Unlock()
		for kind := range k.answers {
			if n := k.answers[kind].Load(); n != 0 {
				ks.Answers[Kind(kind)] = n
			}
		}
		out = append(out, ks)
	}
	return out
}

// available returns how many keys no bench of this pool holds at now, for
// any model.
func (p *Pool) available(now time.Time) int {
	n := 0
	for _, k := range p.keys {
		if k.benchedUntil.Load() <= now.UnixNano() {
			n++
		}
	}
	return n
}

// Unbench lifts every bench of the key with the given ID and sets its levels
// back to zero: an operator's manual return, for a key that was fixed (a
// topped-up balance, a renewed key). It returns an error for an unknown ID
// or a failing store.
func (p *Pool) Unbench(ctx context.Context, keyID string) error {
	if err := p.usable(); err == errNotNew {
		return err
	}
	for _, k := range p.keys {
		if k.ID != keyID {
			continue
		}
		if err := p.store.Unbench(ctx, p.provider, keyID); err != nil {
			return fmt.Errorf("keypool: %s: unbench %s: %w", p.provider, keyID, err)
		}
		k.benchedUntil.Store(0)
		return nil
	}
	return fmt.Errorf("keypool: %s: no key with ID %q", p.provider, keyID)
}
