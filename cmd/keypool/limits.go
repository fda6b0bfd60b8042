package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"time"
)

// The limits of what a client sends the proxy, and of how long it may take.
//
// The http.Server bounds the headers (header_timeout) and the idle time
// between requests (idle_timeout). It has no ReadTimeout, which would
// cancel a request whose answer comes after it, and no WriteTimeout, which
// would run from the request's arrival while an upstream may think for
// minutes. Instead a forwarded request gets a read deadline for its body
// (body_timeout), cleared once the body is in, and its answer a write
// deadline that each write moves on (write_timeout): waiting for the
// upstream, and the pauses of a stream, never count against it, while a
// client that stops reading is cut off.

// escapesRoute reports whether a request path could leave the path of the
// route it is forwarded to: a dot segment — once decoded, or after further
// decoding, as a server that decodes twice would — a backslash segment, or
// anything else that path.Clean would change. The fallback joins the
// decoded path to the route's, so "/v1/%2e%2e/admin" would reach "/admin".
func escapesRoute(p string) bool {
	if p == "" || p[0] != '/' {
		return true
	}
	clean := path.Clean(p)
	if strings.HasSuffix(p, "/") && clean != "/" {
		clean += "/"
	}
	if clean != p {
		return true
	}
	for range 3 {
		for seg := range strings.FieldsFuncSeq(p, func(r rune) bool { return r == '/' || r == '\\' }) {
			if seg == "." || seg == ".." {
				return true
			}
		}
		if !strings.Contains(p, "%") {
			return false
		}
		decoded, err := url.PathUnescape(p)
		if err != nil {
			return false // no more layers: the rest is literal
		}
		p = decoded
	}
	return false
}

// allowedMethods are the methods an upstream HTTP API uses, as an Allow
// header lists them.
const allowedMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// apiMethods answers a request whose method no upstream HTTP API uses —
// TRACE, which would echo the request's headers back, CONNECT, a WebDAV
// method, one made up — with 405 before anything reads it, and passes the
// rest to next.
func apiMethods(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
			next.ServeHTTP(w, r)
			return
		}
		refused(r, "refused")
		w.Header().Set("Allow", allowedMethods)
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error",
			"keypool: the proxy takes only the methods an upstream API uses: "+allowedMethods, nil)
	})
}

// requestBody is a forwarded request's body: at most maxBody bytes, read
// within the body deadline, which is cleared at its end.
type requestBody struct {
	io.ReadCloser
	rc *http.ResponseController
	// tooLarge and timedOut say why a read failed, for the answer: the
	// error itself may reach the proxy wrapped beyond recognition.
	tooLarge, timedOut bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == nil:
	case err == io.EOF:
		_ = b.rc.SetReadDeadline(time.Time{}) // the body is in: waiting for the answer has no deadline
	default:
		b.failed(err)
	}
	return n, err
}

// failed notes why a read of the body failed.
func (b *requestBody) failed(err error) {
	var tooLarge *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &tooLarge):
		b.tooLarge = true
	case errors.As(err, &ne) && ne.Timeout():
		b.timedOut = true
	}
}

// answerWriter writes an answer to a client: it redacts the headers of the
// informational (1xx) answers the proxy passes on — the final answer's are
// redacted before — and moves the write deadline on with every write, so
// that only a write that stalls for writeTimeout fails.
type answerWriter struct {
	http.ResponseWriter
	rc           *http.ResponseController
	redact       *redactor
	writeTimeout time.Duration
	deadline     time.Time    // the write deadline set last
	body         *requestBody // the request's body; nil when it has none
}

func (w *answerWriter) WriteHeader(code int) {
	if code < 200 {
		w.redact.header(w.Header())
	}
	w.extend()
	w.ResponseWriter.WriteHeader(code)
}

func (w *answerWriter) Write(p []byte) (int, error) {
	w.extend()
	return w.ResponseWriter.Write(p)
}

// FlushError flushes what was written to the client; httputil.ReverseProxy
// flushes a stream through it.
func (w *answerWriter) FlushError() error {
	w.extend()
	return w.rc.Flush()
}

// Unwrap returns the server's writer, for http.ResponseController.
func (w *answerWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// extend moves the write deadline to writeTimeout from now, when less than
// half of that is left: a deadline is set at most twice a writeTimeout.
func (w *answerWriter) extend() {
	now := time.Now()
	if w.deadline.Sub(now) > w.writeTimeout/2 {
		return
	}
	w.deadline = now.Add(w.writeTimeout)
	_ = w.rc.SetWriteDeadline(w.deadline)
}

// hasTrailers reports whether an answer's header holds trailers, which the
// server sends after the handler returns.
func hasTrailers(h http.Header) bool {
	if _, ok := h["Trailer"]; ok {
		return true
	}
	for name := range h {
		if strings.HasPrefix(name, http.TrailerPrefix) {
			return true
		}
	}
	return false
}
