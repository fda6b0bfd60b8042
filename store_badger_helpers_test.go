package keypool

import (
	"context"
	"log/slog"
	"strings"
	"sync"
)

// logLines is a slog handler that keeps the lines logged to it.
type logLines struct {
	mu    sync.Mutex
	lines []string // each "LEVEL message key=value …"
}

func (l *logLines) logger() *slog.Logger { return slog.New(l) }

func (*logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler     { return l }
func (l *logLines) WithGroup(string) slog.Handler          { return l }

func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, b.String())
	return nil
}

// all returns the lines logged so far.
func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// count returns how many lines logged so far hold s.
func (l *logLines) count(s string) int {
	n := 0
	for _, line := range l.all() {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

// spellStarts and spellEnds are what the store logs when a failing spell
// starts and ends.
const (
	spellStarts = "badger store failing"
	spellEnds   = "badger store writing again"
)

// keysOf returns the keys s holds state for.
func keysOf(s *BadgerStore) []keyRef {
	var out []keyRef
	for provider, keyID := range s.Keys() {
		out = append(out, keyRef{provider, keyID})
	}
	return out
}
