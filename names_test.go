package keypool

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/keypool-go/keypool/internal/windowspec"
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
		n.get(fmt.Appendf(nil, "model-%d", i))
	}
	assert.Len(t, n.m, maxNames, "the interned names are bounded")
	var none *names
	assert.Equal(t, "x", none.get([]byte("x")))
}

func unsafeData(s string) *byte { return unsafe.StringData(s) }

func TestNamesHoldOnlyCheckedNames(t *testing.T) {
	var n names
	assert.False(t, n.holds(""), "nothing got yet")
	a := n.get([]byte("gpt-4o"))
	assert.True(t, n.holds(a), "a name got is held from its first get")
	assert.True(t, n.holds(strings.Clone(a)), "held by its bytes, not only as the very string")
	assert.False(t, n.holds("gpt-4o-mini"), "another name is not held until it is got")
	for _, bad := range []string{"gpt\x00evil", "gpt\nX-Injected: 1", "\xff\xfe", strings.Repeat("m", windowspec.MaxModelName+1)} {
		got := n.get([]byte(bad))
		assert.Equal(t, bad, got)
		assert.False(t, n.holds(got), "%q: a name CheckModel refuses is never held, so never spared the check", bad)
		assert.NotContains(t, n.m, bad, "%q: nor does it take a place among the interned names", bad)
	}
	assert.True(t, n.holds(n.get([]byte("gpt-4o"))))
	var none *names
	assert.False(t, none.holds("gpt-4o"))
}
