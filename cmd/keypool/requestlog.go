package main

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/keypool-go/keypool"
)

// The proxy logs one line for each request: at info for a request it
// forwards or refuses to forward, with the route, key and model that
// answered, the answer's status and outcome kind, and how long it took; at
// debug for its own endpoints (the status page asks /status every two
// seconds).
//
// What the pools did with a request comes from their attempts (OnAttempt),
// each naming the route (the pool's provider), the key, the model and the
// outcome, written into the record the request carries in its context.

// requestRecord is what the proxy learns of one request as it is handled.
// It is safe for concurrent use.
type requestRecord struct {
	mu        sync.Mutex // guards the fields below
	forwarded bool       // the request was for an upstream, not an own endpoint
	refused   string     // why the proxy answered itself: "no_key", "refused"
	client    string     // the client whose token the request presented
	tag       string     // its tag, as counted (clients.go)
	route     string     // of the last attempt
	key       string
	model     string
	outcome   string // the last attempt's kind: "none", "rate", …; "error" when it had no answer
	attempts  int
}

type recordKey struct{}

// recordOf returns the record a request's context carries, or nil.
func recordOf(ctx context.Context) *requestRecord {
	rec, _ := ctx.Value(recordKey{}).(*requestRecord)
	return rec
}

// set runs f on the record under its lock; a nil record does nothing.
func (r *requestRecord) set(f func(*requestRecord)) {
	if r == nil {
		return
	}
	r.mu.Lock()
	f(r)
	r.mu.Unlock()
}

// logRequests logs a line for each request next handles, once its answer
// is written.
func (s *server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.log.Enabled(r.Context(), slog.LevelInfo) && !s.log.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		rec := &requestRecord{}
		sw := &statusWriter{ResponseWriter: w}
		// Deferred: a stream that breaks ends the handler with a panic
		// (http.ErrAbortHandler), and its request is logged too.
		defer func() { s.logRequest(r, rec, sw.status, time.Since(start)) }()
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), recordKey{}, rec)))
	})
}

// logRequest writes the line of request r: a forwarded one at info, an own
// endpoint's at debug.
func (s *server) logRequest(r *http.Request, rec *requestRecord, status int, took time.Duration) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	level := slog.LevelDebug
	if rec.forwarded {
		level = slog.LevelInfo
	}
	if !s.log.Enabled(r.Context(), level) {
		return
	}
	if status == 0 {
		status = http.StatusOK // the handler wrote nothing: the server answers 200
	}
	outcome := rec.outcome
	if rec.refused != "" {
		outcome = rec.refused
	}
	attrs := make([]slog.Attr, 0, 11)
	attrs = append(attrs, slog.String("method", r.Method), slog.String("path", boundedPath(r.URL.Path)))
	// The client and the tag only where a token named a client, and the
	// request had a tag: an own endpoint's line names neither.
	if rec.client != "" {
		attrs = append(attrs, slog.String("client", rec.client))
	}
	if rec.tag != "" {
		attrs = append(attrs, slog.String("tag", rec.tag))
	}
	attrs = append(attrs,
		slog.String("route", rec.route),
		slog.String("key", rec.key),
		slog.String("model", rec.model),
		slog.Int("status", status),
		slog.String("outcome", outcome),
		slog.Int("attempts", rec.attempts),
		slog.Duration("duration", took.Round(time.Microsecond)))
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}

// maxLoggedPath bounds the path a request's line shows.
const maxLoggedPath = 200

func boundedPath(p string) string {
	if len(p) > maxLoggedPath {
		return p[:maxLoggedPath] + "…"
	}
	return p
}

// statusWriter notes the status of the answer written through it.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap returns the server's writer, for http.ResponseController: flushes,
// deadlines and full duplex reach it.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// attempted writes what a pool's attempt came to into the record of the
// request it belongs to (OnAttempt): the last attempt names the route, key,
// model and outcome of the request's line.
func attempted(ctx context.Context, a keypool.Attempt) {
	recordOf(ctx).set(func(r *requestRecord) {
		r.route, r.key, r.model, r.outcome = a.Provider, a.KeyID, a.Model, a.Kind.String()
		if a.Failed {
			r.outcome = "error"
		}
		r.attempts++
	})
}
