package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keypool-go/keypool"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", "keypool status -url URL | -state DIR", "Shows each key's benches and window use.")
	state := fs.String("state", "", "a state directory not in use by a running proxy")
	addr := fs.String("url", "", "the base URL of a running proxy, such as http://127.0.0.1:8787")
	token := fs.String("token", "", "the proxy token for -url (default: $KEYPOOL_PROXY_TOKEN)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	switch {
	case (*state == "") == (*addr == ""):
		return usageError{errors.New("give one of -url and -state")}
	case *addr != "":
		if *token == "" {
			*token = os.Getenv("KEYPOOL_PROXY_TOKEN")
		}
		routes, err := fetchStatus(ctx, *addr, *token)
		if err != nil {
			return err
		}
		printRoutes(stdout, routes, time.Now())
		return nil
	}
	return printState(ctx, stdout, *state)
}

// fetchStatus asks a running proxy for its status.
func fetchStatus(ctx context.Context, base, token string) ([]keypool.RouteStatus, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+"/status", nil)
	if err != nil {
		return nil, usageError{fmt.Errorf("-url: %v", err)}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s", req.URL.Redacted(), resp.Status)
	}
	var report statusReport
	if err := json.NewDecoder(resp.Body).Decode(&report); err != nil {
		return nil, fmt.Errorf("reading %s: %v", req.URL.Redacted(), err)
	}
	return report.Routes, nil
}

// printRoutes writes a table of each route's keys.
func printRoutes(w io.Writer, routes []keypool.RouteStatus, now time.Time) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tKEY\tTIER\tSTATE\tSENT\tMODEL\tMINUTE REQ/TOK\tDAY REQ/TOK")
	for _, r := range routes {
		name := r.Name
		if r.BenchedUntil.After(now) {
			name += " (benched " + until(r.BenchedUntil, now) + ")"
		}
		for _, k := range r.Keys {
			tier := "free"
			if k.Paid {
				tier = "paid"
			}
			state := "serving"
			if k.Bench.Until.After(now) {
				state = k.Bench.Kind.String() + " " + until(k.Bench.Until, now)
			}
			if len(k.Models) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t-\t-\t-\n", name, k.ID, tier, state, k.Sent)
			}
			for i, m := range k.Models {
				ms := state
				if m.Bench.Until.After(now) {
					ms = m.Bench.Kind.String() + " " + until(m.Bench.Until, now)
				}
				sent := fmt.Sprint(k.Sent)
				if i > 0 {
					sent = ""
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, k.ID, tier, ms, sent, m.Model,
					use(m.Usage.MinuteRequests, m.Limits.RPM, m.Usage.MinuteTokens, m.Limits.TPM),
					use(m.Usage.DayRequests, m.Limits.RPD, m.Usage.DayTokens, m.Limits.TPD))
			}
		}
	}
	tw.Flush()
}

// use shows requests and tokens used against their limits.
func use(req, reqLimit, tok, tokLimit int64) string {
	part := func(n, limit int64) string {
		if limit == 0 {
			return fmt.Sprint(n)
		}
		return fmt.Sprintf("%d/%d", n, limit)
	}
	return part(req, reqLimit) + " " + part(tok, tokLimit)
}

func until(t, now time.Time) string {
	return "until " + t.Local().Format("15:04:05") + " (in " + t.Sub(now).Round(time.Second).String() + ")"
}

// printState shows what a state directory holds.
func printState(ctx context.Context, w io.Writer, dir string) error {
	store, err := keypool.OpenBadgerStore(dir)
	if errors.Is(err, keypool.ErrStoreLocked) {
		return usageError{fmt.Errorf("-state: %w; ask the running proxy with -url", err)}
	}
	if err != nil {
		return err
	}
	defer store.Close()
	now := time.Now()
	byProvider := map[string][]keypool.KeyStats{}
	type stored struct{ provider, keyID string }
	var keys []stored
	for provider, keyID := range store.Keys() {
		keys = append(keys, stored{provider, keyID})
	}
	slices.SortFunc(keys, func(a, b stored) int {
		return cmp.Or(strings.Compare(a.provider, b.provider), strings.Compare(a.keyID, b.keyID))
	})
	var order []string
	for _, k := range keys {
		ks, err := store.State(ctx, k.provider, k.keyID, now)
		if err != nil {
			return err
		}
		ks.ID = k.keyID
		if _, seen := byProvider[k.provider]; !seen {
			order = append(order, k.provider)
		}
		byProvider[k.provider] = append(byProvider[k.provider], ks)
	}
	var routes []keypool.RouteStatus
	for _, p := range order {
		routes = append(routes, keypool.RouteStatus{Name: p, Keys: byProvider[p]})
	}
	if len(routes) == 0 {
		fmt.Fprintf(w, "%s holds no state.\n", dir)
		return nil
	}
	printRoutes(w, routes, now)
	return nil
}
