package keypool

// storeOp is a kind of store call whose failures the pool reports: a spell
// of failures ends only when a call of the kind that failed succeeds again,
// so a store that answers reads but fails writes stays failing.
type storeOp uint32

const (
	opTake storeOp = 1 << iota
	opBench
	opSettle
	opLearn
	opAffinity // an AffinityStore's
	opDisabled // a DisabledStore's
	opHealth   // the store's own Health
)

// storeResult reports what a store call of kind op came to, to the
// OnStoreError hook: the first failure of a spell, and its end. A store that
// can fail between calls (writing behind, or losing its server) says so
// through a Health method, read here after each call.
func (p *Pool) storeResult(op storeOp, err error) {
	if err == nil && p.health == nil && p.storeFailing.Load() == 0 {
		return // the common call: nothing failed, nothing was failing
	}
	p.noteStore(op, err)
	if p.health != nil {
		p.noteStore(opHealth, p.health())
	}
}

// noteStore records whether calls of kind op fail, and tells OnStoreError
// when the store as a whole starts or stops failing.
func (p *Pool) noteStore(op storeOp, err error) {
	for {
		was := p.storeFailing.Load()
		now := was &^ uint32(op)
		if err != nil {
			now |= uint32(op)
		}
		if now == was {
			return
		}
		if !p.storeFailing.CompareAndSwap(was, now) {
			continue
		}
		if f := p.cfg.onStoreError; f != nil && (was == 0) != (now == 0) {
			f(err)
		}
		return
	}
}
