package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/keypool-go/keypool"
)

// keyAction is an operator's action on one key of a running proxy: the
// command keypool NAME and the endpoint POST /keys/{route}/{key}/NAME.
type keyAction struct {
	name string
	help string // the command's
	// done says what the command did; flag names the endpoint's answer's
	// field that says it did.
	done string
	flag string
	// act does it to a key of a pool, for the operator by, and logged is
	// the proxy's log message of it.
	act    func(p *keypool.Pool, ctx context.Context, key, by string) error
	logged string
}

// byNobody adapts an action that records no one to act.
func byNobody(f func(*keypool.Pool, context.Context, string) error) func(*keypool.Pool, context.Context, string, string) error {
	return func(p *keypool.Pool, ctx context.Context, key, _ string) error { return f(p, ctx, key) }
}

// keyActions are the operator's actions on a key.
var keyActions = []keyAction{
	{name: "unbench", flag: "unbenched", logged: "unbenched", act: byNobody((*keypool.Pool).Unbench),
		help: "Lifts the benches of a key of a running proxy, and its route's, so that the next request tries it:\n" +
			"for a key that was fixed (a topped-up balance, a renewed key). It also forgets what the key's windows\n" +
			"count and the limits the vendor stated, so that nothing one answer set outlives it.\n" +
			"keypool status -url lists routes and keys.",
		done: "Unbenched %s of route %s: the next request may use it."},
	{name: "reset-spend", flag: "reset", logged: "spend reset", act: byNobody((*keypool.Pool).ResetSpend),
		help: "Forgets what a key of a running proxy spent today and this month, and what its requests in flight\n" +
			"reserve — its account's too, which the account's other keys share — so that its budget has all its\n" +
			"room again: for a vendor's report that was wrong, or reservations a stopped process left counted.\n" +
			"keypool status -url lists routes and keys.",
		done: "Reset the spend of %s of route %s: its budget has all its room again."},
	{name: "disable", flag: "disabled", logged: "disabled", act: (*keypool.Pool).Disable,
		help: "Takes a key of a running proxy out of rotation until keypool enable puts it back: no request is\n" +
			"sent with it, though those under way finish. It stays out across restarts and reloads (kept in the\n" +
			"state directory, or in Redis for every replica, which hears of it within 5 seconds), and the status\n" +
			"page shows who disabled it and when. keypool status -url lists routes and keys.",
		done: "Disabled %s of route %s: no request is sent with it until keypool enable."},
	{name: "enable", flag: "enabled", logged: "enabled", act: byNobody((*keypool.Pool).Enable),
		help: "Puts a key of a running proxy that keypool disable took out of rotation back in.\n" +
			"keypool status -url lists routes and keys.",
		done: "Enabled %s of route %s: it is back in rotation."},
}

func runUnbench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return keyActions[0].run(ctx, args, stdout, stderr)
}

func runResetSpend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return keyActions[1].run(ctx, args, stdout, stderr)
}

func runDisable(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return keyActions[2].run(ctx, args, stdout, stderr)
}

func runEnable(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return keyActions[3].run(ctx, args, stdout, stderr)
}

// keyActionResult is the JSON answer of an operator's action on a key.
type keyActionResult struct {
	Route string `json:"route"`
	Key   string `json:"key"`
}

// run runs the action's command, which posts to a running proxy's
// endpoint keys/ROUTE/KEY/NAME and says what it did.
func (a keyAction) run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(a.name, "keypool "+a.name+" -url URL ROUTE/KEY", a.help)
	addr := fs.String("url", "", "a running proxy's base URL, as its clients use it: http://127.0.0.1:8787 or http://127.0.0.1:8787/v1")
	token := fs.String("token", "", "an operator token (default: $KEYPOOL_OPERATOR_TOKEN, else $KEYPOOL_PROXY_TOKEN)")
	rest, err := parseArgs(fs, args, stderr, 1)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usageError{errors.New("give the key as ROUTE/KEY, such as openai/free-2")}
	}
	route, key, ok := strings.Cut(rest[0], "/")
	if !ok || route == "" || key == "" {
		return usageError{fmt.Errorf("%q: give the key as ROUTE/KEY, such as openai/free-2", rest[0])}
	}
	if *addr == "" {
		return usageError{errors.New("-url URL is required: the proxy's base URL")}
	}
	var res keyActionResult
	endpoint := "keys/" + url.PathEscape(route) + "/" + url.PathEscape(key) + "/" + a.name
	if err := callProxy(ctx, http.MethodPost, *addr, endpoint, givenToken(*token), &res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, a.done+"\n", res.Key, res.Route)
	return nil
}

// maxHealthAnswer bounds what health reads of /healthz's answer: a line.
const maxHealthAnswer = 4 << 10

func runHealth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("health", "keypool health [-url URL] [-timeout 5s]",
		"Asks a running proxy's /healthz, as a container's HEALTHCHECK does, and prints its answer. The exit\n"+
			"status is 0 when it answers 200 — \"ok\", or \"degraded: …\" while its state store fails and it serves\n"+
			"on, as a load balancer keeps it in rotation — and 1 when it answers otherwise or not at all.")
	addr := fs.String("url", "http://127.0.0.1:8787", "a running proxy's base URL, as its clients use it")
	timeout := fs.Duration("timeout", 5*time.Second, "how long to wait for the answer")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	if *timeout <= 0 {
		return usageError{fmt.Errorf("-timeout %v is not positive", *timeout)}
	}
	u, err := endpointURL(*addr, "healthz")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return usageError{fmt.Errorf("-url: %v", err)}
	}
	resp, err := askOwn(req, "healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxHealthAnswer))
	line, _, _ := strings.Cut(string(body), "\n")
	line = strings.TrimSpace(oneLine.Replace(line))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s: %s", u, resp.Status, line)
	}
	fmt.Fprintln(stdout, line)
	return nil
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "keypool version", "Shows keypool's version and how it was built.")
	if err := parseFlags(fs, args, stderr); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionText(debug.ReadBuildInfo()))
	return nil
}

// versionText says which keypool this is, from its build information:
// the module version ("(devel)" for a build from a checkout), the commit
// when the build recorded one, and the Go toolchain.
func versionText(info *debug.BuildInfo, ok bool) string {
	if !ok {
		return "keypool (no build information) " + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	s := "keypool " + version
	settings := map[string]string{}
	for _, kv := range info.Settings {
		settings[kv.Key] = kv.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		s += " commit " + rev[:min(len(rev), 12)]
		if t := settings["vcs.time"]; t != "" {
			s += " " + t
		}
		if settings["vcs.modified"] == "true" {
			s += " (modified)"
		}
	}
	return s + " " + info.GoVersion + " " + runtime.GOOS + "/" + runtime.GOARCH
}
