package main

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/keypool-go/keypool/internal/vendorsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runKeypool runs the command line args and returns its exit status, stdout
// and stderr.
func runKeypool(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	status := run(t.Context(), args, &stdout, &stderr)
	return status, stdout.String(), stderr.String()
}

func TestEndpointURL(t *testing.T) {
	tests := []struct {
		base, want string
	}{
		{"http://127.0.0.1:8787", "http://127.0.0.1:8787/status"},
		{"http://127.0.0.1:8787/", "http://127.0.0.1:8787/status"},
		{"http://127.0.0.1:8787/v1", "http://127.0.0.1:8787/status"},
		{"http://127.0.0.1:8787/v1/", "http://127.0.0.1:8787/status"},
		{"http://127.0.0.1:8787/v1beta", "http://127.0.0.1:8787/status"},
		{"https://proxy.internal/keypool/v1", "https://proxy.internal/keypool/status"},
		{"http://127.0.0.1:8787/v1?x=1#y", "http://127.0.0.1:8787/status"},
	}
	for _, tt := range tests {
		t.Run(tt.base, func(t *testing.T) {
			u, err := endpointURL(tt.base, "status")
			require.NoError(t, err)
			assert.Equal(t, tt.want, u.String())
		})
	}
	for _, bad := range []string{"127.0.0.1:8787", "ftp://x", "http://", "::"} {
		_, err := endpointURL(bad, "status")
		assert.ErrorContains(t, err, "want the proxy's base URL", bad)
	}
}

// countingUpstream is an upstream that counts what reaches it.
func countingUpstream(t *testing.T) (string, *atomic.Int64) {
	var n atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusNotFound)
	}))
	t.Cleanup(up.Close)
	return up.URL, &n
}

func TestStatusURL(t *testing.T) {
	upstream, reached := countingUpstream(t)
	base, _ := startProxy(t, oneUpstream(t, upstream, "keys: [{id: a, secret: sk-a}, {id: b, secret: sk-b}]"))
	t.Setenv("KEYPOOL_PROXY_TOKEN", "")
	t.Setenv("KEYPOOL_OPERATOR_TOKEN", "")
	tests := []struct {
		name   string
		args   []string
		status int
		out    string
	}{
		{"the base URL", []string{"-url", base, "-token", proxyToken}, 0, "up     a    free  serving"},
		{"the base URL clients use, with /v1", []string{"-url", base + "/v1", "-token", proxyToken}, 0, "up     b    free  serving"},
		{"no token", []string{"-url", base + "/v1"}, 1, "needs an operator token: set KEYPOOL_OPERATOR_TOKEN or pass -token"},
		{"a wrong token", []string{"-url", base, "-token", "nope"}, 1, "refused the token from -token: it is not one of operator_tokens"},
		{"a path the proxy forwards", []string{"-url", base + "/openai/x", "-token", proxyToken}, exitUsage, "give the base URL the proxy's clients use"},
		{"not a URL", []string{"-url", "127.0.0.1:8787"}, exitUsage, "want the proxy's base URL"},
		{"nothing there", []string{"-url", "http://127.0.0.1:1", "-token", "x"}, 1, "is keypool serve running there?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, stdout, stderr := runKeypool(t, append([]string{"status"}, tt.args...)...)
			assert.Equal(t, tt.status, status, "stderr: %s", stderr)
			assert.Contains(t, stdout+stderr, tt.out)
			assert.NotContains(t, stdout+stderr, "0001-01-01")
		})
	}
	t.Setenv("KEYPOOL_PROXY_TOKEN", "from-env-and-wrong")
	_, _, stderr := runKeypool(t, "status", "-url", base)
	assert.Contains(t, stderr, "refused the token from $KEYPOOL_PROXY_TOKEN")
	assert.Zero(t, reached.Load(), "keypool status never reaches an upstream")
}

func TestStatusState(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "typo")
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o700))
	tests := []struct {
		name, dir, want string
	}{
		{"a directory that does not exist", missing, "no such directory"},
		{"a file", file, "not a directory"},
		{"a directory without state", empty, "holds no keypool state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, stderr := runKeypool(t, "status", "-state", tt.dir)
			assert.Equal(t, exitUsage, status)
			assert.Contains(t, stderr, tt.want)
			assert.NotContains(t, stderr, "in use", "no talk of a lock")
		})
	}
	_, err := os.Stat(missing)
	assert.ErrorIs(t, err, os.ErrNotExist, "keypool status created nothing")
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	assert.Empty(t, entries, "keypool status wrote nothing into a directory without state")
}

func TestUnbenchCommand(t *testing.T) {
	base, srv, logs, sim := pageProxy(t)
	benchGone(t, base, sim)
	t.Setenv("KEYPOOL_PROXY_TOKEN", proxyToken)
	t.Setenv("KEYPOOL_OPERATOR_TOKEN", "")

	status, stdout, stderr := runKeypool(t, "unbench", "-url", base+"/v1", "openai/gone")
	require.Equal(t, 0, status, "stderr: %s", stderr)
	assert.Contains(t, stdout, "Unbenched gone of route openai")
	assert.Contains(t, logs.String(), "msg=unbenched route=openai key=gone by=proxy_tokens[0]")
	for _, r := range viewRoutes(srv.fallback.Status(), time.Now()) {
		for _, k := range r.Keys {
			assert.Equal(t, "serving", k.State, "key %s", k.ID)
		}
	}

	tests := []struct {
		name   string
		args   []string
		status int
		want   string
	}{
		{"flags after the key", []string{"openai/gone", "-url", base}, 0, "Unbenched gone"},
		{"an unknown key", []string{"-url", base, "openai/nope"}, 1, `no key "nope" in a route "openai"`},
		{"no route", []string{"-url", base, "gone"}, exitUsage, "give the key as ROUTE/KEY"},
		{"no key", []string{"-url", base}, exitUsage, "give the key as ROUTE/KEY"},
		{"two keys", []string{"-url", base, "openai/gone", "openai/good"}, exitUsage, `unexpected argument "openai/good"`},
		{"no URL", []string{"openai/gone"}, exitUsage, "-url URL is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, stdout, stderr := runKeypool(t, append([]string{"unbench"}, tt.args...)...)
			assert.Equal(t, tt.status, status, "stderr: %s", stderr)
			assert.Contains(t, stdout+stderr, tt.want)
		})
	}
}

func TestHealth(t *testing.T) {
	base, _, store, _ := failingStoreProxy(t)
	status, stdout, stderr := runKeypool(t, "health", "-url", base+"/v1")
	assert.Equal(t, 0, status, stderr)
	assert.Equal(t, "ok\n", stdout)

	store.fail(errors.New("redisstore: redis unavailable"))
	status, stdout, stderr = runKeypool(t, "health", "-url", base)
	assert.Equal(t, 0, status, "a degraded proxy serves on: %s", stderr)
	assert.Equal(t, "degraded: state store: redisstore: redis unavailable\n", stdout)

	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		assert.Equal(t, "/healthz", r.URL.Path)
		assert.Equal(t, "healthz", r.Header.Get(ownEndpointHeader), "marked as the proxy's own")
		http.Error(w, "down\nfor good", http.StatusServiceUnavailable)
	}))
	t.Cleanup(failing.Close)
	status, stdout, stderr = runKeypool(t, "health", "-url", failing.URL)
	assert.Equal(t, 1, status)
	assert.Empty(t, stdout)
	assert.Equal(t, "keypool health: "+failing.URL+"/healthz answered 503 Service Unavailable: down\n", stderr)

	failing.Close()
	status, _, stderr = runKeypool(t, "health", "-url", failing.URL, "-timeout", "2s")
	assert.Equal(t, 1, status)
	assert.Contains(t, stderr, "no answer from "+failing.URL+"/healthz")

	status, _, stderr = runKeypool(t, "health", "-timeout", "0s")
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, stderr, "-timeout 0s is not positive")
	status, _, _ = runKeypool(t, "health", "-url", "127.0.0.1:8787")
	assert.Equal(t, exitUsage, status)
}

func TestVersion(t *testing.T) {
	status, stdout, _ := runKeypool(t, "version")
	assert.Equal(t, 0, status)
	assert.True(t, strings.HasPrefix(stdout, "keypool "), stdout)
	assert.Contains(t, stdout, runtime.Version())

	info := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/keypool-go/keypool/cmd/keypool", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.time", Value: "2026-11-30T10:00:00Z"}, {Key: "vcs.modified", Value: "true"}}}
	assert.Equal(t, "keypool v1.2.3 commit 0123456789ab 2026-11-30T10:00:00Z (modified) go1.26.8 "+runtime.GOOS+"/"+runtime.GOARCH, versionText(info, true))
	info = &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}
	assert.Equal(t, "keypool (devel) go1.26.8 "+runtime.GOOS+"/"+runtime.GOARCH, versionText(info, true))
	assert.Contains(t, versionText(nil, false), "no build information")
}

// TestVersionOfBuild builds the command from the repository with VCS
// stamping and holds what keypool version prints to git's word: the
// revision checked out, "(modified)" exactly when git status lists a
// change, and the module version go build derives from them (v0.0.0-…,
// or the tag at the revision). go build stamps nothing in a git worktree,
// whose .git is a file, so there the test is skipped.
func TestVersionOfBuild(t *testing.T) {
	bin := keypoolBinary(t)
	root := repoRoot(t)
	if st, err := os.Stat(filepath.Join(root, ".git")); err != nil || !st.IsDir() {
		t.Skip("not a git clone (a worktree's .git is a file): go build stamps no VCS information")
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		require.NoError(t, err, "git %v", args)
		return strings.TrimSpace(string(out))
	}
	rev, modified := git("rev-parse", "HEAD"), git("status", "--porcelain") != ""

	out, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	got := string(out)
	assert.True(t, strings.HasPrefix(got, "keypool v"), "a module version from the VCS: %s", got)
	assert.Contains(t, got, " commit "+rev[:12]+" ")
	assert.Equal(t, modified, strings.Contains(got, " (modified) "), "modified: %s", got)
}

// benchedAccountProxy is a proxy whose keys, of an account and not, have
// served requests and one of which is benched, with the default IDs that
// say where each key came from.
func benchedAccountProxy(t *testing.T) (base, state string, srv *server) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-a"}, {Secret: "sk-b", Revoked: true}, {Secret: "sk-c"}}})
	t.Cleanup(sim.Close)
	state = t.TempDir()
	base, srv = startProxy(t, simConfig(sim, state, `
      - {secret: sk-a, account: research-org}
      - {secret: sk-b, account: research-org}
      - {secret: sk-c, limits: {rpm: 60, rpd: 1000}}
    account_limits: {research-org: {rpm: 100, rpd: 10000}}`))
	for range 6 {
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		resp.Body.Close()
	}
	// A request counts for its client once the proxy has finished its
	// answer, a moment after the client closed it: a status read before
	// then would count five.
	require.Eventually(t, func() bool {
		for _, c := range srv.reportClients(time.Now()) {
			if c.Name == "proxy_tokens[0]" {
				return c.Today.Requests == 6
			}
		}
		return false
	}, 10*time.Second, 5*time.Millisecond, "the six requests counted")
	return base, state, srv
}

func TestStatusFitsNarrowTerminals(t *testing.T) {
	base, _, _ := benchedAccountProxy(t)
	t.Setenv("COLUMNS", "80")
	status, stdout, stderr := runKeypool(t, "status", "-url", base, "-token", proxyToken)
	require.Equal(t, 0, status, "stderr: %s", stderr)
	for line := range strings.Lines(stdout) {
		assert.LessOrEqual(t, utf8.RuneCountInString(strings.TrimSuffix(line, "\n")), 100, "too wide: %q", line)
	}
	for _, want := range []string{"upstreams[0].keys[0] (research-org)", "upstreams[0].keys[1] (research-org)", "upstreams[0].keys[2]",
		"benched (auth), back in 12 h"} {
		assert.Contains(t, stdout, want)
	}
	assert.Regexp(t, `\n    gpt-4o-mini  minute \d+/60 0  day \d+/1000 0\n`, stdout, "a line a model")

	status, wide, stderr := runKeypool(t, "status", "-url", base, "-token", proxyToken, "-wide")
	require.Equal(t, 0, status, "stderr: %s", stderr)
	assert.Regexp(t, `^ROUTE\s+KEY\s+TIER\s+STATE\s+SENT\s+MODEL\s+MINUTE REQ/TOK\s+DAY REQ/TOK\n`, wide)
	assert.Regexp(t, `openai\s+upstreams\[0\]\.keys\[1\] \(research-org\)\s+free\s+benched \(auth\), back in 12 h 0 min, \S+( \S+)?\s+1\s+gpt-4o-mini\s+\d+/100 0\s+\d+/10000 0\n`, wide, "-wide keeps a row per key and model")
	assert.Greater(t, widest(wide), 100, "the wide form is wider than the narrow")

	t.Setenv("COLUMNS", "200")
	_, fits, _ := runKeypool(t, "status", "-url", base, "-token", proxyToken)
	assert.Equal(t, wide, fits, "the wide form where it fits")
}

func TestStatusStateNamesAccounts(t *testing.T) {
	_, state, srv := benchedAccountProxy(t)
	srv.close()
	for _, args := range [][]string{{"-wide"}, {}} {
		t.Run(strings.Join(append([]string{"status", "-state"}, args...), " "), func(t *testing.T) {
			t.Setenv("COLUMNS", "80")
			status, stdout, stderr := runKeypool(t, append([]string{"status", "-state", state}, args...)...)
			require.Equal(t, 0, status, "stderr: %s", stderr)
			for i := range len(stdout) {
				if c := stdout[i]; c < 0x20 && c != '\n' && c != '\t' {
					t.Errorf("a control byte %#x at %d of %q", c, i, stdout)
				}
			}
			assert.Contains(t, stdout, "account research-org", "the account's windows, by its name")
			assert.Contains(t, stdout, accountNote, "why upstreams[0].keys[0], with nothing of its own, has no row")
			assert.Contains(t, stdout, "upstreams[0].keys[1]", "the benched key of the account")
			assert.Contains(t, stdout, "upstreams[0].keys[2]", "the key of no account")
			assert.Less(t, strings.Index(stdout, "upstreams[0].keys[2]"), strings.Index(stdout, "account research-org"), "keys, then accounts")
		})
	}
}
