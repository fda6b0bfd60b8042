package notify

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestListeners(t *testing.T) {
	var l Listeners
	l.Call() // none: nothing
	var a, b int
	removeA := l.Add(func() { a++ })
	var removeB func()
	removeB = l.Add(func() { b++; removeB() }) // removes itself while called
	l.Call()
	l.Call()
	assert.Equal(t, 2, a)
	assert.Equal(t, 1, b, "removed after its first call")
	removeA()
	removeA() // again: nothing
	l.Call()
	assert.Equal(t, 2, a)
}

// TestListenersGo: Go calls from a goroutine of its own, in order, so that
// a function may take a lock the caller holds; its goroutine ends.
func TestListenersGo(t *testing.T) {
	var l Listeners
	var mu sync.Mutex
	var got []int
	n := 0
	done := make(chan struct{}, 10)
	l.Add(func() {
		mu.Lock() // held by the caller of Go below: a Call would deadlock
		n++
		got = append(got, n)
		mu.Unlock()
		done <- struct{}{}
	})
	mu.Lock()
	l.Go()
	l.Go()
	l.Go()
	mu.Unlock()
	for range 3 {
		<-done
	}
	assert.Equal(t, []int{1, 2, 3}, got)
	assert.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return !l.draining
	}, time.Second, time.Millisecond, "the goroutine ends")
}
