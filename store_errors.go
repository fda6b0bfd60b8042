package keypool

// storeResult reports what a store call the pool made came to, to the
// OnStoreError hook: the first failure of a spell, and its end. A store that
// can fail between calls (writing behind, or losing its server) says so
// through a Health method, read here after each call that succeeded.
func (p *Pool) storeResult(err error) {
	if err == nil && p.health != nil {
		err = p.health()
	}
	failing := err != nil
	if p.storeFailing.Load() == failing || !p.storeFailing.CompareAndSwap(!failing, failing) {
		return
	}
	if f := p.cfg.onStoreError; f != nil {
		f(err)
	}
}
