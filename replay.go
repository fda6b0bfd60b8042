package keypool

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

// replay hands a request's body to each attempt of a RoundTrip. A body read
// whole (see read) is sent from memory; otherwise the first attempt gets the
// caller's body and later ones a copy from Request.GetBody.
type replay struct {
	orig    io.ReadCloser // the caller's body: nil or http.NoBody for none
	getBody func() (io.ReadCloser, error)
	// data is what was read of the body: all of it when whole, else the
	// start of a body too long to read whole.
	data   []byte
	whole  bool
	handed bool       // orig, or first, has been handed to an attempt
	first  memoryBody // the first attempt's reader of a body read whole
	// rewind is GetBody for a body read whole, made once per request.
	rewind func() (io.ReadCloser, error)
}

// memoryBody reads a body held in memory. The pool reads one it is handed
// (by a Fallback, or as a GetBody of its own) without copying it.
type memoryBody struct {
	data []byte
	off  int // what has been read of data
}

func newMemoryBody(data []byte) *memoryBody { return &memoryBody{data: data} }

func (m *memoryBody) Read(p []byte) (int, error) {
	if m.off >= len(m.data) {
		return 0, io.EOF
	}
	n := copy(p, m.data[m.off:])
	m.off += n
	return n, nil
}

// WriteTo writes the rest of the body to w in one call, as bytes.Reader
// does, so that io.Copy needs no buffer for it.
func (m *memoryBody) WriteTo(w io.Writer) (int64, error) {
	rest := m.data[min(m.off, len(m.data)):]
	if len(rest) == 0 {
		return 0, nil
	}
	n, err := w.Write(rest)
	n = min(max(n, 0), len(rest)) // a Writer that says more than it was given wrote it all
	m.off += n
	if err == nil && n < len(rest) {
		err = io.ErrShortWrite
	}
	return int64(n), err
}

func (*memoryBody) Close() error { return nil }

// read returns up to maxBodyScan bytes of the body without using it up: the
// body is read into memory, whole when it fits, and sent from there on every
// attempt; a longer body keeps its start for the first attempt. It never
// reads a copy from GetBody for this, since some GetBody functions (go-
// retryablehttp's, for one) rewind the very reader the request holds. n is
// the body's length when known, else -1.
func (b *replay) read(n int64) ([]byte, error) {
	if m, ok := b.orig.(*memoryBody); ok && m.off == 0 && len(m.data) <= maxBodyScan {
		b.data, b.whole = m.data, true
		return m.data, nil
	}
	data, err := readAtMost(b.orig, n, maxBodyScan)
	if err != nil {
		return nil, err
	}
	b.data = data
	if len(data) <= maxBodyScan {
		b.whole = true
		_ = b.orig.Close()
		return data, nil
	}
	return data[:maxBodyScan], nil
}

// readAtMost reads r to its end, or to limit+1 bytes when it is longer. n is
// r's length when known (else -1), so that a body of known length is read
// into one buffer of its size.
func readAtMost(r io.Reader, n int64, limit int) ([]byte, error) {
	if n < 0 || n > int64(limit) {
		return io.ReadAll(io.LimitReader(r, int64(limit)+1))
	}
	buf := make([]byte, n, n+1)
	if k, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return buf[:k], nil // shorter than it said: the vendor will judge
		}
		return nil, err
	}
	// The one byte more that tells a body longer than it said goes in
	// buf's spare capacity: a local array would escape to the heap.
	for {
		m, err := r.Read(buf[n : n+1])
		if m > 0 {
			// Longer than it said: read on as a body of unknown length.
			rest, err := io.ReadAll(io.LimitReader(r, int64(limit)-n))
			return append(buf[:n+1], rest...), err
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// replayable reports whether the body can be sent again.
// known returns the body as the pool holds it, and whether that is all of
// it: a request without a body is known to hold nothing.
func (b *replay) known() ([]byte, bool) {
	return b.data, b.orig == nil || b.orig == http.NoBody || b.whole
}

func (b *replay) replayable() bool {
	return b.orig == nil || b.orig == http.NoBody || b.getBody != nil || b.whole
}

// next returns the body for the next attempt.
func (b *replay) next() (io.ReadCloser, error) {
	switch {
	case b.orig == nil || b.orig == http.NoBody:
		return b.orig, nil
	case b.whole && !b.handed:
		b.handed = true
		b.first.data = b.data
		return &b.first, nil
	case b.whole:
		return b.rewindBody()
	case !b.handed:
		b.handed = true
		if b.data != nil {
			return &prefixedBody{r: io.MultiReader(bytes.NewReader(b.data), b.orig), c: b.orig}, nil
		}
		return b.orig, nil
	case b.getBody != nil:
		return b.getBody()
	}
	return nil, errors.New("keypool: request body cannot be sent again")
}

// rewindBody returns a new reader of a body read whole.
func (b *replay) rewindBody() (io.ReadCloser, error) {
	return newMemoryBody(b.data), nil
}

// getBodyFunc returns what an attempt's Request.GetBody should be: the
// caller's, which gives the same bytes, or else one over the body read
// whole.
func (b *replay) getBodyFunc() func() (io.ReadCloser, error) {
	if !b.whole || b.getBody != nil {
		return b.getBody
	}
	if b.rewind == nil {
		b.rewind = b.rewindBody
	}
	return b.rewind
}

// discard closes the caller's body if no attempt has taken it, as a
// RoundTripper must on every path.
func (b *replay) discard() {
	if b.orig != nil && b.orig != http.NoBody && !b.handed && !b.whole {
		_ = b.orig.Close()
	}
}
