package keypool

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

func TestNamesInterns(t *testing.T) {
	var n names
	a := n.get([]byte("gpt-4o"))
	b := n.get([]byte("gpt-4o"))
	assert.Equal(t, "gpt-4o", a)
	assert.Same(t, unsafeData(a), unsafeData(b), "the same bytes give the same string")
	n.get([]byte("claude"))
	i := 0
	allocs := testing.AllocsPerRun(100, func() {
		n.get([]byte([]string{"gpt-4o", "claude"}[i%2]))
		i++
	})
	assert.Zero(t, allocs, "a known name costs no allocation, repeated or not")
	for i := range maxNames + 10 {
		n.get([]byte{byte(i), byte(i >> 8)})
	}
	assert.Len(t, n.m, maxNames, "the interned names are bounded")
	var none *names
	assert.Equal(t, "x", none.get([]byte("x")))
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }
