package keypool

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// repeatEvery is the longest a repeated log line goes untold: a line that
// comes again within it is counted, and the count logged at most this
// often.
const repeatEvery = time.Minute

// maxRepeats bounds the lines a badgerLogger counts at once. Badger's lines
// come from a few dozen format strings, so the bound is never reached in
// practice; reaching it tells every count and starts afresh.
const maxRepeats = 64

// badgerLogger sends Badger's warnings and errors to slog and drops the
// rest. A line Badger repeats — "error flushing memtable to disk … retrying"
// comes once a second while its directory is gone — is logged the first
// time; its repeats are counted, and the count is logged with the latest
// line at most once a minute, and when the store's failing spell ends or
// the store shuts down. Lines are told apart by Badger's format string.
type badgerLogger struct {
	l   *slog.Logger
	now func() time.Time

	mu      sync.Mutex // guards repeats
	repeats map[string]*repeated
}

// repeated is a line Badger has logged, and its repeats since it was last
// told.
type repeated struct {
	level slog.Level
	line  string    // the latest
	seen  time.Time // when it last came
	told  time.Time // when it, or its count, was last logged
	count int       // repeats since told
}

// logLine is a line to log once the logger's lock is released: a handler
// is the user's code.
type logLine struct {
	level slog.Level
	msg   string
	count int // repeats it stands for; 0 for a line logged as it came
}

func newBadgerLogger(l *slog.Logger) *badgerLogger {
	return &badgerLogger{l: l, now: time.Now, repeats: map[string]*repeated{}}
}

func (b *badgerLogger) Errorf(f string, v ...any)   { b.log(slog.LevelError, f, v) }
func (b *badgerLogger) Warningf(f string, v ...any) { b.log(slog.LevelWarn, f, v) }
func (*badgerLogger) Infof(string, ...any)          {}
func (*badgerLogger) Debugf(string, ...any)         {}

func (b *badgerLogger) log(level slog.Level, f string, v []any) {
	line := "badger: " + strings.TrimSpace(fmt.Sprintf(f, v...))
	now := b.now()
	var out []logLine
	b.mu.Lock()
	r := b.repeats[f]
	switch {
	case r != nil && now.Sub(r.seen) < repeatEvery:
		r.line, r.seen = line, now
		r.count++
		if now.Sub(r.told) >= repeatEvery {
			out = append(out, r.tell(now))
		}
	default:
		// A new line, or one quiet for a minute: logged as it comes, after
		// the count its last spell left untold.
		if r != nil && r.count > 0 {
			out = append(out, r.tell(now))
		}
		if r == nil && len(b.repeats) >= maxRepeats {
			out = append(out, b.tellAllLocked(now)...)
		}
		b.repeats[f] = &repeated{level: level, line: line, seen: now, told: now}
		out = append(out, logLine{level: level, msg: line})
	}
	b.mu.Unlock()
	b.emit(out)
}

// tell returns r's count as a line to log, and starts a new count.
func (r *repeated) tell(now time.Time) logLine {
	l := logLine{level: r.level, msg: r.line, count: r.count}
	r.count, r.told = 0, now
	return l
}

// tellAllLocked returns the counts not yet told as lines to log, and
// forgets every line. b.mu must be held.
func (b *badgerLogger) tellAllLocked(now time.Time) []logLine {
	var out []logLine
	for f, r := range b.repeats {
		if r.count > 0 {
			out = append(out, r.tell(now))
		}
		delete(b.repeats, f)
	}
	return out
}

// flush logs the counts not yet told, and forgets every line: the next
// time Badger logs one it is logged in full.
func (b *badgerLogger) flush() {
	b.mu.Lock()
	out := b.tellAllLocked(b.now())
	b.mu.Unlock()
	b.emit(out)
}

func (b *badgerLogger) emit(lines []logLine) {
	for _, l := range lines {
		if l.count > 0 {
			b.l.Log(context.Background(), l.level, l.msg, "repeated", l.count)
		} else {
			b.l.Log(context.Background(), l.level, l.msg)
		}
	}
}
