// Package notify holds the listeners of a store's health changes
// (keypool.HealthNotifier), for the stores of keypool and redisstore.
package notify

import "sync"

// Listeners is a set of functions called on each change. The zero value is
// ready to use; it is safe for concurrent use.
type Listeners struct {
	mu   sync.Mutex
	next int
	fs   map[int]func()
	// queued counts the calls Go asked for that have not begun; draining
	// says a goroutine calls them.
	queued   int
	draining bool
}

// Add adds f and returns the function that removes it, which may be
// called more than once.
func (l *Listeners) Add(f func()) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fs == nil {
		l.fs = map[int]func(){}
	}
	id := l.next
	l.next++
	l.fs[id] = f
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.fs, id)
	}
}

// Call calls every function added, outside the set's lock, so that one may
// add or remove another.
func (l *Listeners) Call() {
	l.mu.Lock()
	fs := l.snapshot()
	l.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Go calls every function added as Call does, from a goroutine of its
// own, so that the caller may hold locks a function would take: calls
// asked for one after another run one after another, in order, from one
// goroutine that ends when none is left.
func (l *Listeners) Go() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queued++
	if l.draining {
		return
	}
	l.draining = true
	go func() {
		for {
			l.mu.Lock()
			if l.queued == 0 {
				l.draining = false
				l.mu.Unlock()
				return
			}
			l.queued--
			fs := l.snapshot()
			l.mu.Unlock()
			for _, f := range fs {
				f()
			}
		}
	}()
}

// snapshot returns the functions added. l.mu is held.
func (l *Listeners) snapshot() []func() {
	fs := make([]func(), 0, len(l.fs))
	for _, f := range l.fs {
		fs = append(fs, f)
	}
	return fs
}
