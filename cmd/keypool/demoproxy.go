package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// demoProxy is keypool demo -proxy: the proxy, as keypool serve runs it, in
// front of two fake vendors, with the demo's keys and a trickle of
// requests of its own, until interrupted.
type demoProxy struct {
	opts   demoOptions
	sims   []*vendorsim.Server
	srv    *server
	ln     net.Listener
	base   string // the proxy's base URL, for clients: http://host:port/v1
	origin string // http://host:port
}

// backupKey is the one key of the demo's second vendor.
var backupKey = vendorsim.Key{Secret: "sk-demo-backup-1", ID: "backup-1", Limits: vendorsim.Limits{RPM: 30}}

// demoConfig is the proxy's configuration for the demo: the demo's keys at
// the first fake vendor, and a backup vendor behind it.
func demoConfig(o demoOptions, keys []demoKey, first, backup string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\nproxy_tokens: [%q]\nstate: %q\nupstreams:\n", o.listen, o.token, o.state)
	fmt.Fprintf(&b, "  - name: openai\n    url: %s\n    keys:\n", first)
	for _, k := range keys {
		fmt.Fprintf(&b, "      - {id: %s, secret: %s, paid: %t, limits: {rpm: %d}}\n", k.id, k.vendor.Secret, k.paid, k.limits.RPM)
	}
	fmt.Fprintf(&b, "  - name: backup\n    url: %s\n    limits: {rpm: %d}\n    keys:\n      - {id: %s, secret: %s}\n",
		backup, backupKey.Limits.RPM, backupKey.ID, backupKey.Secret)
	return b.String()
}

func newDemoProxy(o demoOptions, log *slog.Logger) (*demoProxy, error) {
	d := &demoProxy{opts: o}
	keys := scenario(o.keys)
	cfg := vendorsim.Config{Dialect: vendorsim.OpenAI, Seed: 1}
	for _, k := range keys {
		cfg.Keys = append(cfg.Keys, k.vendor)
	}
	d.sims = append(d.sims, vendorsim.Start(cfg),
		vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Seed: 2, Keys: []vendorsim.Key{backupKey}}))
	conf := demoConfig(o, keys, d.sims[0].URL(), d.sims[1].URL())
	c, err := parseConfig([]byte(conf), "the demo's configuration")
	if err != nil {
		d.close()
		return nil, err
	}
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	if err != nil {
		d.close()
		return nil, err
	}
	if d.srv, err = newServer(s, log); err != nil {
		d.close()
		return nil, err
	}
	if d.ln, err = net.Listen("tcp", o.listen); err != nil {
		d.close()
		return nil, usageError{fmt.Errorf("-listen %s: %v (another address: -listen 127.0.0.1:0)", o.listen, err)}
	}
	d.origin = "http://" + d.ln.Addr().String()
	d.base = d.origin + "/v1"
	return d, nil
}

func (d *demoProxy) close() {
	if d.ln != nil {
		_ = d.ln.Close()
	}
	if d.srv != nil {
		d.srv.close()
	}
	for _, s := range d.sims {
		s.Close()
	}
}

// intro tells where to point a client and a browser.
func (d *demoProxy) intro(w io.Writer) {
	fmt.Fprintf(w, `keypool demo -proxy: a keypool proxy in front of two fake OpenAI-style vendors, offline.

  Base URL     %[1]s    (OPENAI_BASE_URL, or any client's base URL)
  Token        %[2]s    (OPENAI_API_KEY: the proxy token, not a vendor key)
  Status page  %[3]s/    (log in with the token)

Route "openai" has the demo's keys (keypool demo -h describes them); route "backup"
takes what they cannot. Try:

  curl -s %[1]s/chat/completions -H 'Authorization: Bearer %[2]s' \
    -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}'
  %[4]s status -url %[1]s -token %[2]s
  %[4]s unbench -url %[1]s -token %[2]s openai/free-5

`, d.base, d.opts.token, d.origin, selfCommand())
	if d.opts.rate > 0 {
		fmt.Fprintf(w, "The demo sends %g requests a second of its own through the proxy (-rate 0: none).\n", d.opts.rate)
	}
	fmt.Fprintln(w, "The proxy's log follows. Ctrl-C stops it.")
	fmt.Fprintln(w)
}

// run serves until ctx ends, sending the demo's own requests meanwhile.
func (d *demoProxy) run(ctx context.Context, out io.Writer) error {
	d.intro(out)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if d.opts.rate > 0 {
		wg.Go(func() { d.traffic(ctx) })
	}
	err := d.srv.serve(ctx, d.ln)
	cancel()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// traffic sends chat requests through the proxy at the demo's rate until
// ctx ends.
func (d *demoProxy) traffic(ctx context.Context) {
	client := &http.Client{Timeout: 10 * time.Second}
	tick := time.NewTicker(time.Duration(float64(time.Second) / d.opts.rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			wg.Go(func() {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/chat/completions", strings.NewReader(chatBody))
				if err != nil {
					return
				}
				req.Header.Set("Authorization", "Bearer "+d.opts.token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
	}
}

// selfCommand is how to run this keypool again: "go run ./cmd/keypool"
// when go run built it, else "keypool".
func selfCommand() string {
	exe, err := os.Executable()
	if err == nil && strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/keypool"
	}
	return "keypool"
}
