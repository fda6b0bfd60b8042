package notify

import (
	"testing"

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
