package keypool

import (
	"context"
	"errors"
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
	mu      sync.Mutex   // guards byModel
	byModel map[string][]chan struct{}
}

// join puts a request in its model's line and returns its turn signal,
// closed when it reaches the head (at once if the line was empty).
func (w *waitLines) join(model string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.byModel == nil {
		w.byModel = map[string][]chan struct{}{}
	}
	turn := make(chan struct{})
	line := append(w.byModel[model], turn)
	w.byModel[model] = line
	if len(line) == 1 {
		close(turn)
	}
	w.waiting.Add(1)
	return turn
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

// queued reports whether requests for model are waiting.
func (w *waitLines) queued(model string) bool {
	if w.waiting.Load() == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.byModel[model]) > 0
}

// take acquires a key as acquire does and, when the pool waits for keys
// (WaitForKey), waits in line for one when none is free.
func (p *Pool) take(ctx context.Context, c *call, model string, tokens int64) (lease, error) {
	if p.cfg.wait <= 0 {
		return p.acquire(ctx, c, model, tokens)
	}
	var err error
	if !p.lines.queued(model) {
		var l lease
		if l, err = p.acquire(ctx, c, model, tokens); !isNoKey(err) {
			return l, err
		}
	}
	return p.wait(ctx, c, model, tokens, err)
}

// wait waits in line for a key: at its turn, until the soonest key returns,
// then tries again; it gives up when that moment lies beyond the pool's
// wait or the context's deadline.
func (p *Pool) wait(ctx context.Context, c *call, model string, tokens int64, last error) (lease, error) {
	start := time.Now()
	deadline := start.Add(p.cfg.wait)
	turn := p.lines.join(model)
	defer p.lines.leave(model, turn)
	select {
	case <-turn:
	case <-ctx.Done():
		return lease{}, ctx.Err()
	case <-time.After(time.Until(deadline)):
		if last == nil {
			last = &NoAvailableKeyError{Provider: p.provider}
		}
		return lease{}, last
	}
	for {
		l, err := p.acquire(ctx, c, model, tokens)
		var na *NoAvailableKeyError
		if !errors.As(err, &na) {
			if err == nil {
				p.tel.wait(ctx, time.Since(start))
			}
			return l, err
		}
		pause := na.RetryAt.Sub(p.cfg.clock())
		if na.RetryAt.IsZero() || time.Now().Add(pause).After(deadline) {
			return lease{}, err
		}
		if d, ok := ctx.Deadline(); ok && time.Now().Add(pause).After(d) {
			return lease{}, err
		}
		t := time.NewTimer(max(pause, 0))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return lease{}, ctx.Err()
		}
	}
}

func isNoKey(err error) bool {
	var na *NoAvailableKeyError
	return errors.As(err, &na)
}
