package keypool

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadAtMost reads bodies whose stated length is right, short, long or
// unknown: each comes back whole up to the limit and one byte more.
func TestReadAtMost(t *testing.T) {
	const limit = 8
	for _, tt := range []struct {
		name string
		body string
		n    int64
		want string
	}{
		{"as stated", "abcde", 5, "abcde"},
		{"shorter than stated", "abc", 5, "abc"},
		{"longer than stated", "abcdefg", 5, "abcdefg"},
		{"longer than stated and the limit", "abcdefghijkl", 5, "abcdefghi"},
		{"unknown length", "abcdef", -1, "abcdef"},
		{"unknown length past the limit", "abcdefghijkl", -1, "abcdefghi"},
		{"empty, stated", "", 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readAtMost(strings.NewReader(tt.body), tt.n, limit)
			require.NoError(t, err)
			assert.Equal(t, tt.want, string(got), "readAtMost(%q, %d, %d)", tt.body, tt.n, limit)
		})
	}
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = readAtMost(strings.NewReader("abcde"), 5, limit)
	})
	assert.Equal(t, 2.0, allocs, "allocations of readAtMost of a body as long as stated (the reader and the buffer)")
}
