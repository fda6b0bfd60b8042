package keypool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// waitLines holds the requests waiting for a key (WaitForKey), one line per
// model, first come first served. Only the head of a line tries for a key;
// the others wait for their turn, and a new request for a model with a line
// joins it rather than pass it.
type waitLines struct {
	waiting atomic.Int64 // requests in all lines; 0 lets requests skip the lock
	mu      sync.Mutex   // guards byModel and closed
	byModel map[string][]chan struct{}
	// closed is closed by close: every waiter leaves at once.
	closed chan struct{}
}

// join puts a request in its model's line and returns its turn signal,
// closed when it reaches the head (at once if the line was empty), and the
// signal of the pool's close.
func (w *waitLines) join(model string) (turn, closed chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byModel == nil {
		w.byModel = map[string][]chan struct{}{}
	}
	if w.closed == nil {
		w.closed = make(chan struct{})
	}
	turn = make(chan struct{})
	line := append(w.byModel[model], turn)
	w.byModel[model] = line
	if len(line) == 1 {
		close(turn)
	}
	w.waiting.Add(1)
	return turn, w.closed
}

// leave takes a request out of its model's line and, if it was the head,
// gives the next one its turn.
func (w *waitLines) leave(model string, turn chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	line := w.byModel[model]
	for i, c := range line {
		if c != turn {
			continue
		}
		line = append(line[:i], line[i+1:]...)
		if i == 0 && len(line) > 0 {
			close(line[0])
		}
		break
	}
	if len(line) == 0 {
		delete(w.byModel, model)
	} else {
		w.byModel[model] = line
	}
	w.waiting.Add(-1)
}

// close releases every waiter, now and later.
func (w *waitLines) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed == nil {
		w.closed = make(chan struct{})
	}
	select {
	case <-w.closed:
	default:
		close(w.closed)
	}
}

// queued reports whether requests for model are waiting.
func (w *waitLines) queued(model string) bool {
	if w.waiting.Load() == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byModel[model]) > 0
}

// minPause is the shortest a waiting request sleeps between two tries for a
// key: no wait ever turns into a loop that does not sleep.
const minPause = 10 * time.Millisecond

// take acquires a key into l as acquire does and, when the pool waits for
// keys (WaitForKey), waits in line for one when none is free.
func (p *Pool) take(ctx context.Context, c *call, model string, est usageReport, l *lease) error {
	if p.cfg.wait <= 0 {
		return p.acquire(ctx, c, model, est, l)
	}
	var err error
	if !p.lines.queued(model) {
		if err = p.acquire(ctx, c, model, est, l); !isNoKey(err) {
			return err
		}
	}
	return p.wait(ctx, c, model, est, err, l)
}

// wait waits in line for a key. At its turn it sleeps until the soonest key
// returns, then tries again — every key, those that failed this request
// included, since a key that comes back from a bench may serve it now. It
// gives up, with the last *NoAvailableKeyError, when that moment lies beyond
// the pool's wait or the context's deadline; it leaves at once when the
// context ends or the pool is closed. Every try after the first sleeps at
// least minPause.
func (p *Pool) wait(ctx context.Context, c *call, model string, est usageReport, last error, l *lease) error {
	start := time.Now()
	if c.waitEnds.IsZero() {
		// The bound is the request's, whatever it tried since it began to
		// wait.
		c.waitEnds = start.Add(p.cfg.wait)
	}
	deadline := c.waitEnds
	turn, closed := p.lines.join(model)
	defer p.lines.leave(model, turn)
	if last == nil {
		last = noKeyError(p.provider, time.Time{}, p.cfg.clock())
	}
	if err := sleepUntil(ctx, closed, turn, deadline, p.provider); err != nil {
		if errors.Is(err, errWaitOver) {
			return last
		}
		return err
	}
	for {
		c.forget()
		err := p.acquire(ctx, c, model, est, l)
		var na *NoAvailableKeyError
		if !errors.As(err, &na) {
			if err == nil {
				p.tel.wait(ctx, time.Since(start))
			}
			return err
		}
		if na.RetryAt.IsZero() {
			return err
		}
		wake := time.Now().Add(max(na.RetryAt.Sub(p.cfg.clock()), minPause))
		if wake.After(deadline) {
			return err
		}
		if d, ok := ctx.Deadline(); ok && wake.After(d) {
			return err
		}
		if err := sleepUntil(ctx, closed, nil, wake, p.provider); err != nil && !errors.Is(err, errWaitOver) {
			return err
		}
	}
}

// errWaitOver reports that a sleep reached its end.
var errWaitOver = errors.New("wait over")

// sleepUntil sleeps until the moment end (errWaitOver), or until turn is
// closed (nil; a nil turn never is), the context ends (its error) or the pool
// is closed.
func sleepUntil(ctx context.Context, closed, turn chan struct{}, end time.Time, provider string) error {
	t := time.NewTimer(time.Until(end))
	defer t.Stop()
	select {
	case <-turn:
		return nil
	case <-t.C:
		return errWaitOver
	case <-ctx.Done():
		return ctx.Err()
	case <-closed:
		return fmt.Errorf("keypool: %s: pool is closed", provider)
	}
}

// forget makes a request that waited try every key again: the keys that
// failed it may be back, and the moments it saw have passed. The end of its
// wait stays.
func (c *call) forget() {
	c.tried = keySet{}
	c.soonest = time.Time{}
}

func isNoKey(err error) bool {
	var na *NoAvailableKeyError
	return errors.As(err, &na)
}
