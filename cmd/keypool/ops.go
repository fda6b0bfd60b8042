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
	fs := newFlagSet("unbench", "keypool unbench -url URL ROUTE/KEY",
		"Lifts the benches of a key of a running proxy, and its route's, so that the next request tries it:\n"+
			"for a key that was fixed (a topped-up balance, a renewed key). keypool status -url lists routes and keys.")
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
	var res unbenchResult
	endpoint := "keys/" + url.PathEscape(route) + "/" + url.PathEscape(key) + "/unbench"
	if err := callProxy(ctx, http.MethodPost, *addr, endpoint, givenToken(*token), &res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Unbenched %s of route %s: the next request may use it.\n", res.Key, res.Route)
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
