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
)

func runUnbench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runKeyAction(ctx, args, stdout, stderr, "unbench",
		"Lifts the benches of a key of a running proxy, and its route's, so that the next request tries it:\n"+
			"for a key that was fixed (a topped-up balance, a renewed key). It also forgets what the key's windows\n"+
			"count and the limits the vendor stated, so that nothing one answer set outlives it.\n"+
			"keypool status -url lists routes and keys.",
		func(res keyActionResult) string {
			return fmt.Sprintf("Unbenched %s of route %s: the next request may use it.", res.Key, res.Route)
		})
}

func runResetSpend(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return runKeyAction(ctx, args, stdout, stderr, "reset-spend",
		"Forgets what a key of a running proxy spent today and this month, and what its requests in flight\n"+
			"reserve — its account's too, which the account's other keys share — so that its budget has all its\n"+
			"room again: for a vendor's report that was wrong, or reservations a stopped process left counted.\n"+
			"keypool status -url lists routes and keys.",
		func(res keyActionResult) string {
			return fmt.Sprintf("Reset the spend of %s of route %s: its budget has all its room again.", res.Key, res.Route)
		})
}

// keyActionResult is the JSON answer of an operator's action on a key.
type keyActionResult struct {
	Route string `json:"route"`
	Key   string `json:"key"`
}

// runKeyAction runs the operator's command name, which posts to a running
// proxy's endpoint keys/ROUTE/KEY/name and says what it did by done.
func runKeyAction(ctx context.Context, args []string, stdout, stderr io.Writer, name, help string, done func(keyActionResult) string) error {
	fs := newFlagSet(name, "keypool "+name+" -url URL ROUTE/KEY", help)
	addr := fs.String("url", "", "a running proxy's base URL, as its clients use it: http://127.0.0.1:8787 or http://127.0.0.1:8787/v1")
	token := fs.String("token", "", "the proxy token (default: $KEYPOOL_PROXY_TOKEN)")
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
	endpoint := "keys/" + url.PathEscape(route) + "/" + url.PathEscape(key) + "/" + name
	if err := callProxy(ctx, http.MethodPost, *addr, endpoint, givenToken(*token), &res); err != nil {
		return err
	}
	fmt.Fprintln(stdout, done(res))
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
