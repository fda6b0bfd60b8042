package keypool

import (
	"bytes"
	"errors"
	"io"
	"net/http"
)

// replay hands a request's body to each attempt of a RoundTrip. The first
// attempt gets the caller's body; later ones get a copy from
// Request.GetBody, or from the body read whole when it was small enough.
type replay struct {
	orig    io.ReadCloser // the caller's body: nil or http.NoBody for none
	getBody func() (io.ReadCloser, error)
	whole   []byte // the body read whole, when the caller gave no GetBody
	read1   bool   // the body was read whole (into whole) or in part (into prefix)
	prefix  []byte // what was read of a body too long to read whole
	handed  bool   // orig has been handed to an attempt
}

// read returns up to maxBodyScan bytes of the body without using it up. A
// body without GetBody is read into memory: whole when it fits, which makes
// it replayable; otherwise its start is kept for the first attempt.
func (b *replay) read() ([]byte, error) {
	if b.getBody != nil {
		rc, err := b.getBody()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(io.LimitReader(rc, maxBodyScan))
	}
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
