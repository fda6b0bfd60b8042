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
	whole   []byte // the body read whole
	read1   bool   // the body was read whole (into whole) or in part (into prefix)
	prefix  []byte // what was read of a body too long to read whole
	handed  bool   // orig has been handed to an attempt
}

// read returns up to maxBodyScan bytes of the body without using it up: the
// body is read into memory, whole when it fits, and sent from there on every
// attempt; a longer body keeps its start for the first attempt. It never
// reads a copy from GetBody for this, since some GetBody functions (go-
// retryablehttp's, for one) rewind the very reader the request holds.
func (b *replay) read() ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(b.orig, maxBodyScan+1))
	if err != nil {
		return nil, err
	}
	b.read1 = true
	if len(data) <= maxBodyScan {
		b.whole = data
		_ = b.orig.Close()
		return data, nil
	}
	b.prefix = data
	return data[:maxBodyScan], nil
}

// replayable reports whether the body can be sent again.
func (b *replay) replayable() bool {
	return b.orig == nil || b.orig == http.NoBody || b.getBody != nil || (b.read1 && b.prefix == nil)
}

// next returns the body for the next attempt.
func (b *replay) next() (io.ReadCloser, error) {
	switch {
	case b.orig == nil || b.orig == http.NoBody:
		return b.orig, nil
	case b.read1 && b.prefix == nil:
		return io.NopCloser(bytes.NewReader(b.whole)), nil
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

// getBodyFunc returns what an attempt's Request.GetBody should be.
func (b *replay) getBodyFunc() func() (io.ReadCloser, error) {
	if b.read1 && b.prefix == nil {
		return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b.whole)), nil }
	}
	return b.getBody
}

// discard closes the caller's body if no attempt has taken it, as a
// RoundTripper must on every path.
func (b *replay) discard() {
	if b.orig != nil && b.orig != http.NoBody && !b.handed && !(b.read1 && b.prefix == nil) {
		_ = b.orig.Close()
	}
}
