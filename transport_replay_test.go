package keypool

import (
	"io"
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

// TestMemoryBody reads a body held in memory in pieces, and writes it on
// through WriteTo, as io.Copy does, whole or to a writer that takes less.
func TestMemoryBody(t *testing.T) {
	const text = "the body of a request"
	m := newMemoryBody([]byte(text))
	buf := make([]byte, 4)
	var read strings.Builder
	for {
		n, err := m.Read(buf)
		read.Write(buf[:n])
		if err != nil {
			assert.ErrorIs(t, err, io.EOF)
			break
		}
	}
	assert.Equal(t, text, read.String(), "read in pieces of 4")

	m = newMemoryBody([]byte(text))
	n, _ := m.Read(buf)
	var rest strings.Builder
	written, err := io.Copy(&rest, m)
	require.NoError(t, err)
	assert.Equal(t, text[n:], rest.String(), "the rest, through WriteTo")
	assert.Equal(t, int64(len(text)-n), written)
	written, err = m.WriteTo(&rest)
	assert.Zero(t, written, "a body written out writes nothing more")
	assert.NoError(t, err)

	m = newMemoryBody([]byte(text))
	written, err = m.WriteTo(shortWriter{5})
	assert.Equal(t, int64(5), written)
	assert.ErrorIs(t, err, io.ErrShortWrite, "a writer that takes less")
	n, _ = m.Read(make([]byte, 64))
	assert.Equal(t, len(text)-5, n, "what the writer did not take is read next")

	n, err = newMemoryBody(nil).Read(buf)
	assert.Zero(t, n)
	assert.ErrorIs(t, err, io.EOF, "an empty body")
}

// shortWriter takes at most n bytes a write.
type shortWriter struct{ n int }

func (w shortWriter) Write(p []byte) (int, error) { return min(len(p), w.n), nil }
