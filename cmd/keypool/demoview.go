package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keypool-go/keypool"
)

// isTerminal reports whether w is a terminal, where the demo redraws its
// progress in place; elsewhere it writes a plain log.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// view shows a demo's progress and summary.
type view struct {
	out      io.Writer
	tty      bool
	drawn    int       // lines drawn by the last live redraw
	lastLine time.Time // when the plain log last wrote progress
}

func newView(out io.Writer, tty bool) *view { return &view{out: out, tty: tty} }

// recentEvents is how many events the live view shows.
const recentEvents = 6

func (v *view) intro(d *demo) {
	fmt.Fprintf(v.out, "keypool demo: %d keys against a fake OpenAI-style vendor on %s, %.0f requests a second for %s.\n",
		len(d.keys), d.sim.URL(), d.opts.rate, d.opts.duration)
	fmt.Fprintf(v.out, "State (Badger) in %s.\n", d.opts.state)
	for _, st := range d.pool.Stats() {
		if s := state(st); s != "serving" {
			fmt.Fprintf(v.out, "  %s is still %s from an earlier run.\n", st.ID, s)
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
	if !v.tty {
		v.log(d)
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%5.1fs of %s · sent %d · served %d · failed %d (%d with no key free)\n",
		time.Since(d.start).Seconds(), d.opts.duration, d.sent.Load(), d.served.Load(), d.failed.Load(), d.noKey.Load())
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTIER\tSTATE\tSENT\tOK\tMINUTE")
	for i, st := range d.pool.Stats() {
		k := d.keys[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", st.ID, tier(st.Paid), state(st), st.Sent, st.Answers[keypool.KindNone], minuteUse(st, k))
	}
	tw.Flush()
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
		fmt.Fprintf(v.out, "\033[K%s\n", l)
	}
	v.drawn = len(lines)
}

// log writes the events since the last call, and a progress line every five
// seconds.
func (v *view) log(d *demo) {
	for _, e := range d.events.unseen() {
		fmt.Fprintln(v.out, e)
	}
	if time.Since(v.lastLine) < 5*time.Second {
		return
	}
	v.lastLine = time.Now()
	fmt.Fprintf(v.out, "%5.1fs  sent %d, served %d, failed %d\n",
		time.Since(d.start).Seconds(), d.sent.Load(), d.served.Load(), d.failed.Load())
}

// state says whether a key is serving or benched, and until when.
func state(st keypool.KeyStats) string {
	b := st.Bench
	for _, m := range st.Models {
		if m.Model == demoModel && m.Bench.Until.After(b.Until) {
			b = m.Bench
		}
	}
	if b.Until.IsZero() {
		return "serving"
	}
	return fmt.Sprintf("benched: %s, back in %s", b.Kind, time.Until(b.Until).Round(time.Second))
}

// minuteUse shows the key's requests in the last minute against its limit.
func minuteUse(st keypool.KeyStats, k demoKey) string {
	var used int64
	for _, m := range st.Models {
		used += m.Usage.MinuteRequests
	}
	if k.rpmShow == 0 {
		return "-"
	}
	return fmt.Sprintf("%d/%d", used, k.rpmShow)
}

// summary prints the demo's outcome.
func (v *view) summary(d *demo) {
	fmt.Fprintf(v.out, "\nSummary after %s: %d requests sent by callers.\n\n", time.Since(d.start).Round(100*time.Millisecond), d.sent.Load())
	tw := tabwriter.NewWriter(v.out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "KEY\tTIER\tSENT\tSERVED\tRATE\tQUOTA\tAUTH\tTRANSIENT\t")
	var served, paidServed int64
	for _, st := range d.pool.Stats() {
		ok := st.Answers[keypool.KindNone]
		served += ok
		if st.Paid {
			paidServed += ok
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t\n", st.ID, tier(st.Paid), st.Sent, ok,
			st.Answers[keypool.KindRate], st.Answers[keypool.KindQuota], st.Answers[keypool.KindAuth], st.Answers[keypool.KindTransient])
	}
	tw.Flush()
	totals := d.sim.Totals()
	fmt.Fprintf(v.out, "\nBenches by kind: rate %d, quota %d, auth %d, transient %d.\n",
		d.benches[keypool.KindRate].Load(), d.benches[keypool.KindQuota].Load(),
		d.benches[keypool.KindAuth].Load(), d.benches[keypool.KindTransient].Load())
	fmt.Fprintf(v.out, "The vendor answered %d requests with 429, %d with 401, %d with a server error.\n",
		totals.RateLimited+totals.Billing, totals.Unauthorized, totals.ServerErrors)
	fmt.Fprintf(v.out, "Callers saw %d failures: %d when no key could take the request; every other vendor failure went to another key.\n",
		d.failed.Load(), d.noKey.Load())
	share := 0.0
	if served > 0 {
		share = 100 * float64(paidServed) / float64(served)
	}
	fmt.Fprintf(v.out, "The paid key served %d of %d answers (%.0f%%).\n", paidServed, served, share)
}
