package keypool

import (
	"sync"
	"sync/atomic"
	"time"
)

// A key that comes back from a bench of a minute or more returns carefully:
// it takes one request at a time, for the model it was benched for (or for
// every model after a bench of the whole key), until one succeeds. Requests
// that find its one request under way go to other keys or wait, so a key
// the vendor still limits costs one refused request, not a burst of them.
// The care is this pool's: replicas sharing a store each send their own one
// request.

// carefulBench is the shortest bench after which a key returns carefully.
const carefulBench = time.Minute

// probeRetry is when a request that found a returning key's one request
// under way tries again, if no other key serves it.
const probeRetry = time.Second

// returns holds, for one key, the models it is returning for: "" stands for
// every model.
type returns struct {
	n       atomic.Int32 // len(byModel): 0 lets requests skip the lock
	mu      sync.Mutex   // guards byModel
	byModel map[string]*returning
}

// returning is one model's return: the bench it returns from ends at from
// (Unix nanoseconds), and a request is under way while probing.
type returning struct {
	from    int64
	probing bool
}

// mark notes that the key returns for model ("" for every model) once a
// bench ending at until is over.
func (r *returns) mark(model string, until time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byModel == nil {
		r.byModel = map[string]*returning{}
	}
	if s := r.byModel[model]; s != nil {
		s.from = max(s.from, until.UnixNano())
		return
	}
	if len(r.byModel) >= maxModelsPerKey {
		return // a bound on what clients can make the pool remember
	}
	r.byModel[model] = &returning{from: until.UnixNano()}
	r.n.Store(int32(len(r.byModel)))
}

// admit reports whether a request for model may go to the key at now, and
// whether it is the one request of a return (a probe). A request is refused
// while another is the probe of a return whose bench is over; the caller
// then retries at now + probeRetry.
func (r *returns) admit(model string, now time.Time) (ok, probe bool) {
	if r.n.Load() == 0 {
		return true, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := now.UnixNano()
	for _, m := range [...]string{model, ""} {
		s := r.byModel[m]
		if s == nil || s.from > n {
			continue // no return, or a bench not over: the store refuses
		}
		if s.probing {
			return false, false
		}
		s.probing = true
		return true, true
	}
	return true, false
}

// done ends a probe for model: a success ends the return (and a return of
// every model), anything else lets the next request probe.
func (r *returns) done(model string, succeeded bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range [...]string{model, ""} {
		if s := r.byModel[m]; s != nil {
			s.probing = false
			if succeeded {
				delete(r.byModel, m)
			}
		}
	}
	r.n.Store(int32(len(r.byModel)))
}
