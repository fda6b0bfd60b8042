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
	// Account is the key's account, whose windows and benches it shares;
	// Pool.Stats gives each key of an account the account's models, cap
	// and benches, with its own bench of every model (a revoked key).
	Account string
	// Bench is the bench that holds the key for every model; zero when
	// none does.
	Bench Bench
	// Cap is what the key has used across its models.
	Cap Usage
	// Spent is what the key spent today and this month, in US dollars;
	// Budget its caps. For a key of an account, AccountSpent and
	// AccountBudget are the account's.
	Spent, Budget               Budget
	AccountSpent, AccountBudget Budget
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
	// Limits are the limits enforced on the key for the model: axis by
	// axis, the tighter of Configured and Learned. Configured are those the
	// pool was given (WithLimits, WithModelLimits, WithAccountLimits,
	// Key.Limits); Learned those the vendor last stated. A Store fills only
	// Learned.
	Limits     Limits
	Configured Limits
	Learned    Limits
	Bench      Bench
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
		ks := p.stored(k, now)
		ks.ID, ks.Paid, ks.Account, ks.Sent, ks.Answers = k.ID, k.Paid, k.Account, k.sent.Load(), map[Kind]int64{}
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

// stored returns what the store holds for key k at now — for a key of an
// account, the account's windows and benches, and the later of its own
// bench and the account's — with each model's configured, learned and
// enforced limits. A store that fails leaves it empty.
func (p *Pool) stored(k *poolKey, now time.Time) KeyStats {
	state := func(id string) (KeyStats, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), statsTimeout)
		defer cancel()
		st, err := p.store.State(ctx, p.provider, id, now)
		return st, err == nil
	}
	ks, ok := state(k.ID)
	if !ok {
		return KeyStats{}
	}
	ks.Budget = k.Budget
	if k.Account != "" {
		own := ks
		if ks, ok = state(accountID(k.Account)); !ok {
			return KeyStats{}
		}
		if own.Bench.Until.After(ks.Bench.Until) {
			ks.Bench = own.Bench
		}
		ks.AccountSpent, ks.AccountBudget = ks.Spent, p.cfg.accountBudgets[k.Account]
		ks.Spent, ks.Budget = own.Spent, own.Budget
	}
	for i := range ks.Models {
		m := &ks.Models[i]
		m.Configured = p.limits(k, m.Model)
		m.Limits = m.Configured.tighter(m.Learned)
	}
	slices.SortFunc(ks.Models, func(a, b ModelStats) int { return cmp.Compare(a.Model, b.Model) })
	return ks
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
// topped-up balance, a renewed key). It also forgets what the key's
// windows count and the limits the vendor stated (see Store.Unbench) —
// for a key of an account, the account's, which its other keys share — so
// that whatever one answer set, a learned day window included, is lifted.
// A Fallback's route over the pool that is benched comes back with it. It
// returns an error for an unknown ID or a failing store.
func (p *Pool) Unbench(ctx context.Context, keyID string) error {
	k, err := p.operatorKey(keyID)
	if err != nil {
		return err
	}
	for _, id := range k.stateIDs() {
		if err := p.store.Unbench(ctx, p.provider, id); err != nil {
			return fmt.Errorf("keypool: %s: unbench %s: %w", p.provider, keyID, err)
		}
	}
	k.benchedUntil.Store(0)
	p.unbenched.Add(1)
	return nil
}

// ResetSpend forgets what the key with the given ID spent today and this
// month, and what its requests in flight reserve — for a key of an
// account, the account's spend too, which its other keys share — so that
// its budget has all its room again: an operator's answer to a vendor's
// report that was wrong, or to reservations a process that ended left
// counted. A request in flight counts what its answer costs once it
// settles. A Fallback's route over the pool that is benched comes back
// with it. It returns an error for an unknown ID, a store that cannot
// reset spend (see SpendResetter) or a failing store.
func (p *Pool) ResetSpend(ctx context.Context, keyID string) error {
	k, err := p.operatorKey(keyID)
	if err != nil {
		return err
	}
	r, ok := p.store.(SpendResetter)
	if !ok {
		return fmt.Errorf("keypool: %s: reset spend of %s: the store (%T) cannot reset spend", p.provider, keyID, p.store)
	}
	for _, id := range k.stateIDs() {
		if err := r.ResetSpend(ctx, p.provider, id); err != nil {
			return fmt.Errorf("keypool: %s: reset spend of %s: %w", p.provider, keyID, err)
		}
	}
	p.unbenched.Add(1) // a Fallback's route the spent budget benched comes back
	return nil
}

// operatorKey returns the key with the given ID, for an operator's call.
func (p *Pool) operatorKey(keyID string) (*poolKey, error) {
	if err := p.usable(); err == errNotNew {
		return nil, err
	}
	for _, k := range p.keys {
		if k.ID == keyID {
			return k, nil
		}
	}
	return nil, fmt.Errorf("keypool: %s: no key with ID %q", p.provider, keyID)
}

// stateIDs returns the IDs under which a store keeps the key's state: its
// own, and its account's when it names one.
func (k *poolKey) stateIDs() []string {
	if k.Account == "" {
		return []string{k.ID}
	}
	return []string{k.ID, accountID(k.Account)}
}
