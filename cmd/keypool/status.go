package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/keypool-go/keypool"
	"golang.org/x/term"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", "keypool status -url URL | -state DIR", "Shows each key's state, benches and window use.")
	state := fs.String("state", "", "a state directory that no running proxy holds")
	addr := fs.String("url", "", "a running proxy's base URL, as its clients use it: http://127.0.0.1:8787 or http://127.0.0.1:8787/v1")
	token := fs.String("token", "", "an operator token for -url (default: $KEYPOOL_OPERATOR_TOKEN, else $KEYPOOL_PROXY_TOKEN)")
	wide := fs.Bool("wide", false, "a row per key and model, however wide (default: when it fits the terminal, $COLUMNS or else 80 columns)")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	switch {
	case (*state == "") == (*addr == ""):
		return usageError{errors.New("give one of -url and -state")}
	case *addr != "":
		var report statusReport
		if err := callProxy(ctx, http.MethodGet, *addr, "status", givenToken(*token), &report); err != nil {
			return err
		}
		if st := report.Store; st != nil && !st.Healthy {
			fmt.Fprintf(stdout, "The state store is failing: %s\n\n", st.Reason)
		}
		printStatus(stdout, report.Routes, time.Now(), false, *wide, statusWidth(stdout))
		printClients(stdout, report.Clients)
		return nil
	}
	return printState(ctx, stdout, *state, *wide, statusWidth(stdout))
}

// fetchStatus asks a running proxy at base for its routes.
func fetchStatus(ctx context.Context, base, token string) ([]routeView, error) {
	var report statusReport
	err := callProxy(ctx, http.MethodGet, base, "status", credential{value: token, from: "-token"}, &report)
	return report.Routes, err
}

// credential is an operator token and where it came from, for messages.
type credential struct{ value, from string }

// givenToken is the token given with -token, else $KEYPOOL_OPERATOR_TOKEN,
// else $KEYPOOL_PROXY_TOKEN (which a proxy without operator_tokens takes).
func givenToken(flag string) credential {
	if flag != "" {
		return credential{flag, "-token"}
	}
	if v := os.Getenv("KEYPOOL_OPERATOR_TOKEN"); v != "" {
		return credential{v, "$KEYPOOL_OPERATOR_TOKEN"}
	}
	return credential{os.Getenv("KEYPOOL_PROXY_TOKEN"), "$KEYPOOL_PROXY_TOKEN"}
}

// proxyCallTimeout bounds a call to a proxy's own endpoint.
const proxyCallTimeout = 30 * time.Second

// maxProxyAnswer bounds the answer of a proxy's own endpoint.
const maxProxyAnswer = 16 << 20

// apiVersion matches the last path segment of a base URL that names an API
// version, which clients add and the proxy forwards: v1, v1beta, v2alpha1.
var apiVersion = regexp.MustCompile(`/v[0-9]+((alpha|beta)[0-9]*)?/?$`)

// endpointURL returns the URL of the proxy's own endpoint (such as
// "status") from the base URL its clients use, with or without the API
// version they add.
func endpointURL(base, endpoint string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("-url %q: want the proxy's base URL, such as http://127.0.0.1:8787", base)}
	}
	p := strings.TrimSuffix(apiVersion.ReplaceAllString(u.Path, ""), "/")
	return &url.URL{Scheme: u.Scheme, Host: u.Host, Path: p + "/" + endpoint}, nil
}

// askOwn sends req to the proxy's own endpoint, marked as the proxy's own
// so that a base URL that does not reach the endpoint is refused, never
// forwarded upstream; without an answer, it says where it asked.
func askOwn(req *http.Request, endpoint string) (*http.Response, error) {
	req.Header.Set(ownEndpointHeader, endpoint)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("no answer from %s (is keypool serve running there?): %v", req.URL, err)
	}
	return resp, nil
}

// callProxy sends a request to one of a proxy's own endpoints and decodes
// its JSON answer into v. It marks the request as the proxy's own, so that
// the proxy never forwards it upstream, and says what to do when the proxy
// refuses it.
func callProxy(ctx context.Context, method, base, endpoint string, token credential, v any) error {
	u, err := endpointURL(base, endpoint)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, proxyCallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return usageError{fmt.Errorf("-url: %v", err)}
	}
	if token.value != "" {
		req.Header.Set("Authorization", "Bearer "+token.value)
	}
	resp, err := askOwn(req, endpoint)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProxyAnswer))
	if err != nil {
		return fmt.Errorf("reading %s: %v", u, err)
	}
	var failure struct {
		Error struct{ Message string } `json:"error"`
	}
	_ = json.Unmarshal(body, &failure)
	switch {
	case resp.StatusCode == http.StatusUnauthorized && token.value == "":
		return fmt.Errorf("%s needs an operator token: set KEYPOOL_OPERATOR_TOKEN or pass -token (one of operator_tokens in the proxy's configuration, or of proxy_tokens when it sets none)", u)
	case resp.StatusCode == http.StatusUnauthorized:
		return fmt.Errorf("%s refused the token from %s: it is not one of operator_tokens in the proxy's configuration (nor of proxy_tokens, when it sets none)", u, token.from)
	case resp.StatusCode == http.StatusNotFound && strings.Contains(failure.Error.Message, "own endpoints"):
		return usageError{fmt.Errorf("-url %s: give the base URL the proxy's clients use, such as http://127.0.0.1:8787/v1 (%s)", base, failure.Error.Message)}
	case resp.StatusCode != http.StatusOK && failure.Error.Message != "":
		return fmt.Errorf("%s answered %s: %s", u, resp.Status, failure.Error.Message)
	case resp.StatusCode != http.StatusOK:
		return fmt.Errorf("%s answered %s: is it a keypool proxy?", u, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s did not answer as a keypool proxy does: %v", u, err)
	}
	return nil
}

// printStatus writes each route's keys, and the spend table: the wide
// table of printRoutes when wide is set or when it fits width, else the
// narrow form, a few lines a key, fitted to width.
func printStatus(w io.Writer, routes []routeView, now time.Time, fromStore, wide bool, width int) {
	var table bytes.Buffer
	printTable(&table, routes, now, fromStore)
	if wide || widest(table.String()) <= width {
		w.Write(table.Bytes())
	} else {
		printNarrow(w, routes, now, fromStore, width)
	}
	printSpend(w, routes)
}

// statusWidth is the width keypool status fits its output to: the
// terminal's when out is one, else $COLUMNS, else 80.
func statusWidth(out io.Writer) int {
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return terminalWidth(f)
	}
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	return compactBelow
}

// widest is the width in runes of the longest line of s.
func widest(s string) int {
	n := 0
	for line := range strings.Lines(s) {
		n = max(n, utf8.RuneCountInString(strings.TrimSuffix(line, "\n")))
	}
	return n
}

// printRoutes writes the wide table of each route's keys at now, and the
// spend table.
func printRoutes(w io.Writer, routes []routeView, now time.Time, fromStore bool) {
	printTable(w, routes, now, fromStore)
	printSpend(w, routes)
}

// keyName is a key as the status shows it: its ID, with its account.
func keyName(k keyView) string {
	if k.Account != "" {
		return k.ID + " (" + k.Account + ")"
	}
	return k.ID
}

// routeName is a route as the status shows it: its name, with its bench.
func routeName(r routeView, now time.Time) string {
	if !r.BenchedUntil.IsZero() {
		return r.Name + " (benched, " + backIn(r.BenchedUntil, now) + ")"
	}
	return r.Name
}

// learnedNote is the footnote of a limit learned from the vendor.
const learnedNote = "* a limit learned from the vendor, tighter than any configured"

// printTable writes a table of each route's keys at now, a row per key
// and model: a key of an account is shown with it, and a limit learned
// from the vendor with a star. Keys read from a state directory have no
// tier or count of requests sent.
func printTable(w io.Writer, routes []routeView, now time.Time, fromStore bool) {
	starred := false
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUTE\tKEY\tTIER\tSTATE\tSENT\tMODEL\tMINUTE REQ/TOK\tDAY REQ/TOK")
	for _, r := range routes {
		name := routeName(r, now)
		for _, k := range r.Keys {
			tier, sent := tier(k.Paid), fmt.Sprint(k.Sent)
			if fromStore {
				tier, sent = "-", "-"
			}
			state, id := stateWords(k, now), keyName(k)
			if len(k.Models) == 0 {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t-\t-\t-\n", name, id, tier, state, sent)
			}
			for i, m := range k.Models {
				if i > 0 {
					sent = ""
				}
				starred = starred || m.Minute.learned() || m.Day.learned()
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, id, tier, state, sent, m.Model, m.Minute, m.Day)
			}
		}
	}
	tw.Flush()
	if starred {
		fmt.Fprintln(w, learnedNote)
	}
}

// printNarrow writes each route's keys at now in lines that fit width: a
// line a route, then for each key a line of its ID, tier, requests sent
// and state (the state on a line of its own when it does not fit), and a
// line a model of its use of the minute's and the day's windows.
func printNarrow(w io.Writer, routes []routeView, now time.Time, fromStore bool, width int) {
	starred := false
	for i, r := range routes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintln(w, routeName(r, now))
		for _, k := range r.Keys {
			head := "  " + keyName(k)
			if !fromStore {
				head += "  " + tier(k.Paid) + "  sent " + fmt.Sprint(k.Sent)
			}
			state := stateWords(k, now)
			if line := head + "  " + state; utf8.RuneCountInString(line) <= width {
				fmt.Fprintln(w, line)
			} else {
				fmt.Fprintln(w, head)
				fmt.Fprintln(w, "    "+state)
			}
			tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
			for _, m := range k.Models {
				starred = starred || m.Minute.learned() || m.Day.learned()
				fmt.Fprintf(tw, "    %s\tminute %s\tday %s\n", m.Model, m.Minute, m.Day)
			}
			tw.Flush()
		}
	}
	if starred {
		fmt.Fprintln(w, learnedNote)
	}
}

// printSpend writes a table of what each key and account with a budget,
// or with spend, spent today and this month, against its budget; nothing
// when none has.
func printSpend(w io.Writer, routes []routeView) {
	type row struct {
		who   string
		spend spendView
	}
	var rows []row
	for _, r := range routes {
		for _, k := range r.Keys {
			if k.Spend != nil {
				rows = append(rows, row{r.Name + "/" + k.ID, *k.Spend})
			}
		}
		for _, a := range r.Accounts {
			rows = append(rows, row{r.Name + " account " + a.Name, a.Spend})
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SPEND (USD)\tTODAY\tTHIS MONTH")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.who, spentOf(r.spend.Today, r.spend.PerDay), spentOf(r.spend.Month, r.spend.PerMonth))
	}
	tw.Flush()
}

// spentOf says what was spent against a cap: "0.07 of 0.10", or "0.07"
// without one.
func spentOf(spent, limit float64) string {
	if limit == 0 {
		return usd(spent)
	}
	return usd(spent) + " of " + usd(limit)
}

// usd says an amount of US dollars to the cent, or to four places below a
// cent, as the status page does: "5.00", "0.035", "0.0004".
func usd(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	if v != 0 && math.Abs(v) < 1 {
		s = strings.TrimRight(strconv.FormatFloat(v, 'f', 4, 64), "0")
		if i := strings.IndexByte(s, '.'); len(s)-i-1 < 2 {
			s += strings.Repeat("0", 2-(len(s)-i-1))
		}
	}
	return s
}

func (w windowView) learned() bool { return w.RequestsLearned || w.TokensLearned }

// String shows requests and tokens used against their limits, a limit
// learned from the vendor starred: "12/20 340", "3/8* 120".
func (w windowView) String() string {
	part := func(n, limit int64, learned bool) string {
		switch {
		case limit == 0:
			return fmt.Sprint(n)
		case learned:
			return fmt.Sprintf("%d/%d*", n, limit)
		}
		return fmt.Sprintf("%d/%d", n, limit)
	}
	return part(w.Requests, w.RequestsLimit, w.RequestsLearned) + " " + part(w.Tokens, w.TokensLimit, w.TokensLearned)
}

// printState shows what a state directory holds, as printStatus does. It
// opens only a directory that holds keypool's state, and creates nothing.
func printState(ctx context.Context, w io.Writer, dir string, wide bool, width int) error {
	if err := checkStateDir(dir); err != nil {
		return err
	}
	store, err := keypool.OpenBadgerStore(dir)
	if errors.Is(err, keypool.ErrStoreLocked) {
		return usageError{fmt.Errorf("-state %s is in use by a running keypool (a proxy or a demo): ask the proxy with keypool status -url", dir)}
	}
	if err != nil {
		return err
	}
	defer store.Close()
	now := time.Now()
	routes, err := viewStore(ctx, store, now)
	if err != nil {
		return err
	}
	if len(routes) == 0 {
		fmt.Fprintf(w, "%s holds no keys' state yet.\n", dir)
		return nil
	}
	printStatus(w, routes, now, true, wide, width)
	if slices.ContainsFunc(routes, func(r routeView) bool {
		return slices.ContainsFunc(r.Keys, func(k keyView) bool { return strings.HasPrefix(k.ID, "account ") })
	}) {
		fmt.Fprintln(w, accountNote)
	}
	return nil
}

// accountNote says why a state directory may show fewer keys than a
// proxy's status: a key of an account keeps no state of its own but a
// bench or spend.
const accountNote = "An account's row holds the windows its keys share; a key of an account has a row only for a bench or spend of its own."

// checkStateDir says what is wrong with dir as a state directory to read:
// it does not exist, is not a directory, or holds no keypool state (a
// Badger database has a MANIFEST).
func checkStateDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return usageError{fmt.Errorf("-state %s: no such directory (give the proxy's state directory, its configuration's state:)", dir)}
	case err != nil:
		return usageError{fmt.Errorf("-state: %v", err)}
	case !st.IsDir():
		return usageError{fmt.Errorf("-state %s: not a directory", dir)}
	}
	if _, err := os.Stat(filepath.Join(dir, "MANIFEST")); errors.Is(err, os.ErrNotExist) {
		return usageError{fmt.Errorf("-state %s: holds no keypool state (no Badger database in it)", dir)}
	}
	return nil
}
