package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// demoModel is the model the demo's requests name.
const demoModel = "gpt-4o-mini"

// chatBody is the demo's request.
const chatBody = `{"model":"` + demoModel + `","max_tokens":64,"messages":[{"role":"user","content":"Say hello."}]}`

// demoOptions are the demo's flags.
type demoOptions struct {
	keys     int
	duration time.Duration
	rate     float64
	state    string
	proxy    bool   // serve the proxy in front of the fake vendors
	listen   string // where the proxy listens
	token    string // the proxy token
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "keypool demo [flags]", "Runs a pool of keys against a fake OpenAI-style vendor on loopback and shows what it does.")
	var o demoOptions
	fs.IntVar(&o.keys, "keys", 5, "free keys in the pool, at least 3: one is revoked, one has a small daily quota; one paid key is added")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "how long to send requests")
	fs.Float64Var(&o.rate, "rate", 4, "requests offered per second")
	fs.StringVar(&o.state, "state", "", "keep the pool's state in this directory (Badger) across runs; default: a temporary directory")
	fs.BoolVar(&o.proxy, "proxy", false, "serve the proxy (keypool serve) in front of the fake vendors, with its status page, until interrupted;\n-rate then defaults to 2, and -duration to none")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8787", "with -proxy: the address the proxy listens on")
	fs.StringVar(&o.token, "token", "demo-token", "with -proxy: the proxy token its clients present")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.proxy && !set["rate"] {
		o.rate = 2
	}
	switch {
	case o.keys < 3:
		return usageError{fmt.Errorf("-keys %d: the demo needs at least 3 free keys", o.keys)}
	case o.duration <= 0:
		return usageError{fmt.Errorf("-duration %v: must be positive", o.duration)}
	case o.rate < 0 || (o.rate == 0 && !o.proxy):
		return usageError{fmt.Errorf("-rate %v: must be positive", o.rate)}
	case o.token == "" && o.proxy:
		return usageError{errors.New("-token: must not be empty")}
	}
	if o.state == "" {
		dir, err := os.MkdirTemp("", "keypool-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		o.state = dir
	}
	if o.proxy {
		if set["duration"] {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, o.duration)
			defer cancel()
		}
		d, err := newDemoProxy(o, slog.New(slog.NewTextHandler(stderr, nil)))
		if err != nil {
			return err
		}
		defer d.close()
		return d.run(ctx, stdout)
	}
	d, err := newDemo(o)
	if err != nil {
		return err
	}
	defer d.close()
	return d.run(ctx, newView(stdout))
}

// demoKey is one key of the demo: what the vendor enforces and what the pool
// is told.
type demoKey struct {
	id      string
	paid    bool
	note    string
	vendor  vendorsim.Key
	limits  keypool.Limits // what the pool is told
	rpmShow int64          // the limit shown beside the key's minute use
	// learns marks the key whose limit the vendor states below the one
	// the pool is told: the demo shows the pool learn it.
	learns bool
}

// scenario returns the demo's keys: most free keys are well described to
// the pool; one is stricter at the vendor than the pool knows (it meets
// 429s), one has a small daily quota the pool does not know, one is revoked,
// and the paid key takes what the free keys cannot.
func scenario(free int) []demoKey {
	var keys []demoKey
	for i := 1; i <= free; i++ {
		id := fmt.Sprintf("free-%d", i)
		k := demoKey{id: id, vendor: vendorsim.Key{Secret: "sk-demo-" + id, ID: id}}
		switch i {
		case free:
			k.note = "revoked"
			k.vendor.Revoked = true
		case free - 1:
			k.note = "daily quota of 5 the pool does not know"
			k.vendor.Limits = vendorsim.Limits{RPM: 20, RPD: 5}
			k.limits, k.rpmShow = keypool.Limits{RPM: 20}, 20
		case 2:
			k.note = "the vendor allows 12 a minute, the pool is told 20: it learns 12 from the vendor's headers"
			k.vendor.Limits = vendorsim.Limits{RPM: 12}
			k.limits, k.rpmShow = keypool.Limits{RPM: 20}, 20
			k.learns = true
		default:
			k.note = "5% server errors"
			k.vendor.Limits = vendorsim.Limits{RPM: 20}
			k.vendor.FaultRate = 0.05
			k.limits, k.rpmShow = keypool.Limits{RPM: 20}, 20
		}
		keys = append(keys, k)
	}
	paid := demoKey{id: "paid", paid: true, note: "used only when no free key can take a request",
		vendor: vendorsim.Key{Secret: "sk-demo-paid", ID: "paid", Limits: vendorsim.Limits{RPM: 40}},
		limits: keypool.Limits{RPM: 40}, rpmShow: 40}
	return append(keys, paid)
}

// demo is one run of the demo.
type demo struct {
	opts    demoOptions
	keys    []demoKey
	sim     *vendorsim.Server
	store   *keypool.BadgerStore
	pool    *keypool.Pool
	client  *http.Client
	start   time.Time
	events  eventLog
	benches [5]atomic.Int64 // by keypool.Kind
	// keyBenches counts each key's benches by keypool.Kind, by key ID.
	keyBenches map[string]*[5]atomic.Int64
	// learning watches the pool's attempts for what it learns of the
	// keys' limits from the vendor's headers.
	learning *learning

	sent, served, failed atomic.Int64
	noKey                atomic.Int64 // failures because no key could take a request
	refused              atomic.Int64 // failures that are the vendor's 429 or 402, passed on
	otherFailed          atomic.Int64 // other failures: other answers, network errors
}

func newDemo(o demoOptions) (*demo, error) {
	d := &demo{opts: o, keys: scenario(o.keys), keyBenches: map[string]*[5]atomic.Int64{}}
	for _, k := range d.keys {
		d.keyBenches[k.id] = new([5]atomic.Int64)
	}
	d.learning = newLearning(d.keys)
	cfg := vendorsim.Config{Dialect: vendorsim.OpenAI, Seed: 1}
	var keys []keypool.Key
	for _, k := range d.keys {
		cfg.Keys = append(cfg.Keys, k.vendor)
		keys = append(keys, keypool.Key{Secret: k.vendor.Secret, ID: k.id, Paid: k.paid, Limits: k.limits})
	}
	store, err := keypool.OpenBadgerStore(o.state)
	if errors.Is(err, keypool.ErrStoreLocked) {
		return nil, usageError{fmt.Errorf("-state: %w", err)}
	}
	if err != nil {
		return nil, err
	}
	pool, err := keypool.New("openai", keys,
		keypool.WithStore(store),
		keypool.WithBenches(keypool.Benches{Transient: 5 * time.Second}),
		keypool.OnEvict(d.evicted))
	if err != nil {
		_ = store.Close()
		return nil, err
	}
	d.store = store
	d.sim = vendorsim.Start(cfg)
	d.pool = pool
	d.client = &http.Client{Transport: pool.Transport(d.learning), Timeout: 10 * time.Second}
	return d, nil
}

func (d *demo) close() {
	_ = d.pool.Close()
	_ = d.store.Close()
	d.sim.Close()
}

// evicted notes a bench.
func (d *demo) evicted(e keypool.Eviction) {
	d.benches[e.Kind].Add(1)
	if b := d.keyBenches[e.KeyID]; b != nil {
		b[e.Kind].Add(1)
	}
	d.events.add(fmt.Sprintf("%5.1fs  benched %s: %s for %s", time.Since(d.start).Seconds(), e.KeyID, e.Kind, span(e.For)))
}

// run sends requests at the offered rate for the demo's duration, showing
// progress, then prints the summary.
func (d *demo) run(parent context.Context, view *view) error {
	ctx, cancel := context.WithTimeout(parent, d.opts.duration)
	defer cancel()
	d.start = time.Now()
	d.learning.start = d.start
	view.intro(d)

	var wg sync.WaitGroup
	tick := time.NewTicker(time.Duration(float64(time.Second) / d.opts.rate))
	defer tick.Stop()
	redraw := time.NewTicker(250 * time.Millisecond)
	defer redraw.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			wg.Go(func() { d.request(ctx) })
		case <-redraw.C:
			view.progress(d)
		}
	}
	wg.Wait()
	view.progress(d)
	view.summary(d, parent.Err() != nil)
	return nil
}

// request sends one chat request and counts its outcome.
func (d *demo) request(ctx context.Context) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.sim.URL()+"/v1/chat/completions", strings.NewReader(chatBody))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	d.sent.Add(1)
	tctx, answered := d.learning.track(ctx, d.pool, &d.events)
	resp, err := d.client.Do(req.WithContext(tctx))
	answered()
	var na *keypool.NoAvailableKeyError
	switch {
	case errors.As(err, &na):
		d.failed.Add(1)
		d.noKey.Add(1)
	case err != nil:
		if ctx.Err() == nil {
			d.failed.Add(1)
			d.otherFailed.Add(1)
		} else {
			d.sent.Add(-1) // cut short by the end of the demo
		}
	default:
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			d.served.Add(1)
		case http.StatusTooManyRequests, http.StatusPaymentRequired:
			d.failed.Add(1)
			d.refused.Add(1)
		default:
			d.failed.Add(1)
			d.otherFailed.Add(1)
		}
	}
}

// eventLog keeps the latest events.
type eventLog struct {
	mu    sync.Mutex // guards lines and next
	lines []string
	next  int // lines handed out by since
}

func (l *eventLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

// latest returns the last n events.
func (l *eventLog) latest(n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines[max(len(l.lines)-n, 0):]...)
}

// unseen returns the events since the last call.
func (l *eventLog) unseen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.lines[l.next:]...)
	l.next = len(l.lines)
	return out
}
