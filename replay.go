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
	whole   []byte     // the body, when read whole
	isWhole bool       // the body was read whole into whole
	prefix  []byte     // what was read of a body too long to read whole
	handed  bool       // orig, or first, has been handed to an attempt
	first   memoryBody // the first attempt's reader of whole
	// rewind is GetBody for a body read whole, made once per request.
	rewind func() (io.ReadCloser, error)
}

// memoryBody reads a body held in memory. The pool reads one it is handed
// (by a Fallback, or as a GetBody of its own) without copying it.
type memoryBody struct {
	bytes.Reader
	data []byte
}

func newMemoryBody(data []byte) *memoryBody {
	m := &memoryBody{data: data}
	m.Reset(data)
	return m
}

func (*memoryBody) Close() error { return nil }

// read returns up to maxBodyScan bytes of the body without using it up: the
// body is read into memory, whole when it fits, and sent from there on every
// attempt; a longer body keeps its start for the first attempt. It never
// reads a copy from GetBody for this, since some GetBody functions (go-
// retryablehttp's, for one) rewind the very reader the request holds. n is
// the body's length when known, else -1.
func (b *replay) read(n int64) ([]byte, error) {
	if m, ok := b.orig.(*memoryBody); ok && m.Len() == len(m.data) && len(m.data) <= maxBodyScan {
		b.whole, b.isWhole = m.data, true
		return m.data, nil
	}
	data, err := readAtMost(b.orig, n, maxBodyScan)
	if err != nil {
		return nil, err
	}
	if len(data) <= maxBodyScan {
		b.whole, b.isWhole = data, true
		_ = b.orig.Close()
		return data, nil
	}
	b.prefix = data
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
func (b *replay) replayable() bool {
	return b.orig == nil || b.orig == http.NoBody || b.getBody != nil || b.isWhole
}

// next returns the body for the next attempt.
func (b *replay) next() (io.ReadCloser, error) {
	switch {
	case b.orig == nil || b.orig == http.NoBody:
		return b.orig, nil
	case b.isWhole && !b.handed:
		b.handed = true
		b.first.data = b.whole
		b.first.Reset(b.whole)
		return &b.first, nil
	case b.isWhole:
		return b.rewindBody()
	case !b.handed:
		b.handed = true
		if b.prefix != nil {
			return &prefixedBody{r: io.MultiReader(bytes.NewReader(b.prefix), b.orig), c: b.orig}, nil
		}
		return b.orig, nil
	case b.getBody != nil:
		return b.getBody()
	}
	return nil, errors.New("keypool: request body cannot be sent again")
}

// rewindBody returns a new reader of a body read whole.
func (b *replay) rewindBody() (io.ReadCloser, error) {
	return newMemoryBody(b.whole), nil
}

// getBodyFunc returns what an attempt's Request.GetBody should be: the
// caller's, which gives the same bytes, or else one over the body read
// whole.
func (b *replay) getBodyFunc() func() (io.ReadCloser, error) {
	if !b.isWhole || b.getBody != nil {
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
	if b.orig != nil && b.orig != http.NoBody && !b.handed && !b.isWhole {
		_ = b.orig.Close()
	}
}
