package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/keypool-go/keypool"
)

// view shows a demo's progress and summary: redrawn in place on a
// terminal — a table at 80 columns or more, a compact one below — and as
// plain lines on a pipe, a file or a terminal whose TERM is dumb.
type view struct {
	out      io.Writer
	live     bool       // redraw in place
	width    func() int // the terminal's columns now
	drawn    int        // lines drawn by the last live redraw
	lastLine time.Time  // when the plain log last wrote progress
	now      func() time.Time
}

// compactBelow is the width under which the live view is compact.
const compactBelow = 80

// newView returns the view for out: live when out is a terminal that
// understands cursor movement.
func newView(out io.Writer) *view {
	v := &view{out: out, now: time.Now, width: func() int { return compactBelow }}
	f, ok := out.(*os.File)
	if ok && redraws(term.IsTerminal(int(f.Fd())), os.Getenv("TERM")) {
		v.live = true
		v.width = func() int { return terminalWidth(f) }
	}
	return v
}

// redraws reports whether the demo redraws in place: on a terminal that
// moves its cursor, which a dumb one (TERM=dumb, or no TERM) does not.
func redraws(terminal bool, termName string) bool {
	return terminal && termName != "" && termName != "dumb"
}

// terminalWidth is f's width in columns: from the terminal, else $COLUMNS,
// else 80.
func terminalWidth(f *os.File) int {
	if w, _, err := term.GetSize(int(f.Fd())); err == nil && w > 0 {
		return w
	}
	if w, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && w > 0 {
		return w
	}
	return compactBelow
}

// recentEvents is how many events the live view shows.
const recentEvents = 6

func (v *view) intro(d *demo) {
	fmt.Fprintf(v.out, "keypool demo: %d keys against a fake OpenAI-style vendor on %s, %g requests a second for %s.\n",
		len(d.keys), d.sim.URL(), d.opts.rate, d.opts.duration)
	fmt.Fprintf(v.out, "State (Badger) in %s.\n", d.opts.state)
	now := v.now()
	for _, st := range d.pool.Stats() {
		if k := viewKey(st, now); k.State == "benched" {
			fmt.Fprintf(v.out, "  %s is still %s from an earlier run.\n", k.ID, stateWords(k, now))
		}
	}
	tw := tabwriter.NewWriter(v.out, 2, 4, 2, ' ', 0)
	for _, k := range d.keys {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.id, tier(k.paid), k.note)
	}
	tw.Flush()
	fmt.Fprintln(v.out)
}

func tier(paid bool) string {
	if paid {
		return "paid"
	}
	return "free"
}

// progress shows where the demo is.
func (v *view) progress(d *demo) {
	if !v.live {
		v.log(d)
		return
	}
	width := v.width()
	now := v.now()
	var b strings.Builder
	elapsed := now.Sub(d.start).Seconds()
	if width < compactBelow {
		fmt.Fprintf(&b, "%.0fs/%s sent %d ok %d failed %d\n", elapsed, d.opts.duration, d.sent.Load(), d.served.Load(), d.failed.Load())
	} else {
		fmt.Fprintf(&b, "%5.1fs of %s · sent %d · served %d · failed %d (%d with no key free)\n",
			elapsed, d.opts.duration, d.sent.Load(), d.served.Load(), d.failed.Load(), d.noKey.Load())
	}
	b.WriteString("\n")
	stats := d.pool.Stats()
	table, learned := v.keyTable(d, stats, now, width >= compactBelow)
	if width >= compactBelow && widest(table) > width-1 {
		// The wide table would be cut at the terminal's edge, its last
		// columns lost: the compact one fits.
		table, learned = v.keyTable(d, stats, now, false)
	}
	b.WriteString(table)
	for _, l := range learned {
		b.WriteString(l)
	}
	b.WriteString("\nrecent events:\n")
	events := d.events.latest(recentEvents)
	for i := range recentEvents {
		if i < len(events) {
			b.WriteString("  " + events[i])
		}
		b.WriteString("\n")
	}
	if v.drawn > 0 {
		fmt.Fprintf(v.out, "\033[%dA", v.drawn)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for _, l := range lines {
		// A line as wide as the terminal wraps, and the next redraw
		// would move up too few lines: keep every line narrower.
		fmt.Fprintf(v.out, "\033[K%s\n", clip(l, width-1))
	}
	v.drawn = len(lines)
}

// keyTable returns the live view's table of keys — wide, or compact — and
// a footnote for each limit it stars as learned.
func (v *view) keyTable(d *demo, stats []keypool.KeyStats, now time.Time, wide bool) (string, []string) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	if wide {
		fmt.Fprintln(tw, "KEY\tTIER\tSTATE\tSENT\tOK\tMINUTE")
	} else {
		fmt.Fprintln(tw, "KEY\tSTATE\tMIN")
	}
	var learned []string
	for i, st := range stats {
		k := viewKey(st, now)
		for _, m := range k.Models {
			if m.Minute.RequestsLearned {
				learned = append(learned, fmt.Sprintf("* %s: learned RPM %d from the vendor's headers (configured %d)\n", k.ID, m.Learned.RPM, m.Configured.RPM))
			}
			if m.Learned.RPD != 0 && (m.Configured.RPD == 0 || m.Learned.RPD < m.Configured.RPD) {
				learned = append(learned, fmt.Sprintf("* %s: learned a daily quota of %d from the vendor's headers\n", k.ID, m.Learned.RPD))
			}
		}
		if wide {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", k.ID, tier(k.Paid), stateWords(k, now), st.Sent, st.Answers[keypool.KindNone], minuteUse(k, d.keys[i]))
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", k.ID, shortState(k, now), minuteUse(k, d.keys[i]))
		}
	}
	tw.Flush()
	return b.String(), learned
}

// clip cuts s to at most n runes, ending in … when cut.
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n || n < 1 {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// shortState is stateWords in a few columns: "serving", "full/min",
// "auth 11 h 59 min".
func shortState(k keyView, now time.Time) string {
	switch k.State {
	case "benched":
		return k.Bench.Kind.String() + " " + span(k.Bench.Until.Sub(now))
	case "full":
		if k.Full == "minute" {
			return "full/min"
		}
		return "full/" + k.Full
	}
	return k.State
}

// log writes the events since the last call, and a progress line every five
// seconds.
func (v *view) log(d *demo) {
	for _, e := range d.events.unseen() {
		fmt.Fprintln(v.out, e)
	}
	now := v.now()
	if now.Sub(v.lastLine) < 5*time.Second {
		return
	}
	v.lastLine = now
	fmt.Fprintf(v.out, "%5.1fs  sent %d, served %d, failed %d\n",
		now.Sub(d.start).Seconds(), d.sent.Load(), d.served.Load(), d.failed.Load())
}

// minuteUse shows the key's requests in the last minute against the limit
// the pool enforces — starred when it is the one learned from the vendor —
// or, before the key has served, the one the demo shows for it.
func minuteUse(k keyView, dk demoKey) string {
	var used int64
	limit, learned := dk.rpmShow, false
	for _, m := range k.Models {
		used += m.Minute.Requests
		if m.Minute.RequestsLimit != 0 {
			limit, learned = m.Minute.RequestsLimit, m.Minute.RequestsLearned
		}
	}
	switch {
	case limit == 0:
		return "-"
	case learned:
		return fmt.Sprintf("%d/%d*", used, limit)
	}
	return fmt.Sprintf("%d/%d", used, limit)
}

// summary prints the demo's outcome and explains the failures callers saw.
func (v *view) summary(d *demo, interrupted bool) {
	how := ""
	if interrupted {
		how = " (interrupted)"
	}
	fmt.Fprintf(v.out, "\nSummary after %s%s: %d requests sent by callers.\n\n", v.now().Sub(d.start).Round(100*time.Millisecond), how, d.sent.Load())
	tw := tabwriter.NewWriter(v.out, 2, 4, 2, ' ', tabwriter.AlignRight)
	// The last four columns count each key's benches by kind, as the line
	// below them counts them all: a key benched by a success that said its
	// day was spent counts a quota bench, though no answer was a 429.
	fmt.Fprintln(tw, "KEY\tTIER\tSENT\tSERVED\tRATE\tQUOTA\tAUTH\tTRANSIENT\t")
	var served, paidServed int64
	for _, st := range d.pool.Stats() {
		ok := st.Answers[keypool.KindNone]
		served += ok
		if st.Paid {
			paidServed += ok
		}
		var b [5]int64
		if kb := d.keyBenches[st.ID]; kb != nil {
			for k := range b {
				b[k] = kb[k].Load()
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", st.ID, tier(st.Paid), st.Sent, ok,
			b[keypool.KindRate], b[keypool.KindQuota], b[keypool.KindAuth], b[keypool.KindTransient])
	}
	tw.Flush()
	totals := d.sim.Totals()
	v.say("\nBenches by kind, as the last four columns count them per key: rate %d, quota %d, auth %d, transient %d.\n",
		d.benches[keypool.KindRate].Load(), d.benches[keypool.KindQuota].Load(),
		d.benches[keypool.KindAuth].Load(), d.benches[keypool.KindTransient].Load())
	v.say("The vendor answered %d requests with 429, %d with 401, %d with a server error.\n",
		totals.RateLimited+totals.Billing, totals.Unauthorized, totals.ServerErrors)
	v.learned(d)
	v.failures(d)
	share := 0.0
	if served > 0 {
		share = 100 * float64(paidServed) / float64(served)
	}
	v.say("The paid key served %d of %d answers (%.0f%%).\n", paidServed, served, share)
}

// learned says which keys' limits the pool learned from the vendor's
// headers, below what it was told, and the vendor's 429s of each before and
// after.
func (v *view) learned(d *demo) {
	for _, k := range d.keys {
		ll, ok, before, after := d.learning.learnedOf(k.id)
		if !ok {
			continue
		}
		v.say("%s: learned RPM %d (configured %d) from the vendor's headers %.1f s in, and held it there since; the vendor's 429s for it: %d before, %d after.\n",
			k.id, ll.rpm, ll.configured, ll.at.Sub(d.start).Seconds(), before, after)
	}
}

// failures explains the failures callers saw, by cause.
func (v *view) failures(d *demo) {
	failed := d.failed.Load()
	if failed == 0 {
		v.say("Callers saw no failures: every vendor failure went to another key.\n")
		return
	}
	paid := d.keys[len(d.keys)-1]
	v.say("Callers saw %d failures; every other vendor failure went to another key:\n", failed)
	if n := d.noKey.Load(); n > 0 {
		v.say("  %d when no key could take the request: the free keys benched or full, and the paid key at its own limit of %d a minute;\n", n, paid.rpmShow)
	}
	if n := d.refused.Load(); n > 0 {
		v.say("  %d refused by the vendor (429) on the last key left to try, which the pool passes on: it had no other key;\n", n)
	}
	if n := d.otherFailed.Load(); n > 0 {
		v.say("  %d other failures: a network error or another answer;\n", n)
	}
	v.say("  more free keys (-keys) or fewer requests a second (-rate) leave fewer requests with no key.\n")
}

// say writes prose; on a live terminal its lines wrap at word boundaries
// to the terminal's width, indented as they start.
func (v *view) say(format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	if !v.live {
		fmt.Fprint(v.out, text)
		return
	}
	width := v.width() - 1
	for _, line := range strings.SplitAfter(text, "\n") {
		body := strings.TrimLeft(line, " ")
		indent := strings.Repeat(" ", len(line)-len(body))
		if len(indent) > 0 {
			indent += "  "
		}
		col := 0
		for i, word := range strings.Fields(body) {
			n := utf8.RuneCountInString(word)
			switch {
			case i == 0:
				fmt.Fprint(v.out, line[:len(line)-len(body)]+word)
				col = len(line) - len(body) + n
			case col+1+n > width:
				fmt.Fprint(v.out, "\n"+indent+word)
				col = len(indent) + n
			default:
				fmt.Fprint(v.out, " "+word)
				col += 1 + n
			}
		}
		if strings.HasSuffix(line, "\n") {
			fmt.Fprintln(v.out)
		}
	}
}
