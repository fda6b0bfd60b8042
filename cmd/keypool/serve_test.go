package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

const proxyToken = "kp-proxy-token-for-tests"

// startProxy starts the proxy for the YAML configuration in front of
// whatever it names, and returns its URL.
func startProxy(t *testing.T, conf string) (string, *server) {
	t.Helper()
	var c config
	require.NoError(t, yaml.Unmarshal([]byte(conf), &c))
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	var logs bytes.Buffer
	srv, err := newServer(s, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	hs := httptest.NewUnstartedServer(srv.handler())
	var served syncBuffer // what net/http logs: a panic it recovered, for one
	hs.Config.ErrorLog = log.New(&served, "", 0)
	hs.Start()
	t.Cleanup(func() {
		hs.Close()
		srv.close()
		assert.NotContains(t, logs.String(), "sk-", "a secret reached the logs")
		assert.NotContains(t, served.String(), "panic", "the server recovered a panic")
	})
	return hs.URL, srv
}

// chat sends a chat request to the proxy with the proxy token.
func chat(t *testing.T, base string, stream bool) (*http.Response, error) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":%t,"messages":[{"role":"user","content":"hello"}]}`, stream)
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// oneUpstream is a configuration of one upstream named up at url, with the
// rest of its fields as given, in a fresh state directory.
func oneUpstream(t testing.TB, url, fields string) string {
	return fmt.Sprintf("proxy_tokens: [%q]\nstate: %s\nupstreams:\n  - {name: up, url: %s, %s}\n", proxyToken, t.TempDir(), url, fields)
}

func simConfig(sim *vendorsim.Server, state string, keys string) string {
	return fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - name: openai
    url: %s
    keys:
%s
`, proxyToken, state, sim.URL(), keys)
}

func TestProxyPoolsKeysUnderLoad(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-one", ID: "one", Limits: vendorsim.Limits{RPM: 40}},
		{Secret: "sk-two", ID: "two", Limits: vendorsim.Limits{RPM: 40}},
		{Secret: "sk-three", ID: "three", Limits: vendorsim.Limits{RPM: 40}},
		{Secret: "sk-gone", ID: "gone", Revoked: true},
	}})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, simConfig(sim, t.TempDir(), `
      - {id: one, secret: sk-one}
      - {id: two, secret: sk-two}
      - {id: three, secret: sk-three}
      - {id: gone, secret: sk-gone}`))

	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for range 8 {
				resp, err := chat(t, base, false)
				if !assert.NoError(t, err) {
					return
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					limited.Add(1)
					assert.NotEmpty(t, resp.Header.Get("Retry-After"))
					assert.Contains(t, string(b), "no openai key available until")
				default:
					t.Errorf("status %d: %s", resp.StatusCode, b)
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(160), ok.Load()+limited.Load())
	assert.GreaterOrEqual(t, ok.Load(), int64(110), "the three keys' 120 a minute, less what the vendor's headers set aside")
	for _, id := range []string{"one", "two", "three"} {
		st, _ := sim.StatsOf(id)
		assert.Positive(t, st.Served, "key %s served", id)
		assert.LessOrEqual(t, sim.MaxInWindow(id, time.Minute), 40, "key %s over its limit", id)
	}
	gone, _ := sim.StatsOf("gone")
	assert.LessOrEqual(t, gone.Unauthorized, int64(20), "no more 401s than requests in flight when the first came")
	for range 10 {
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		resp.Body.Close()
	}
	after, _ := sim.StatsOf("gone")
	assert.Equal(t, gone.Unauthorized, after.Unauthorized, "the revoked key stays benched")
}

func TestProxyStreamsUnbuffered(t *testing.T) {
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"n\":1}\n\n")
		w.(http.Flusher).Flush()
		<-release // the rest waits until the client has the first event
		_, _ = io.WriteString(w, "data: {\"n\":2}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(upstream.Close)
	base, _ := startProxy(t, oneUpstream(t, upstream.URL, `keys: [{secret: sk-a}, {secret: sk-b}]`))
	resp, err := chat(t, base, true)
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	first, err := lines.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "data: {\"n\":1}\n", first, "the first event arrives before the upstream sends the rest")
	close(release)
	rest, err := io.ReadAll(lines)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: {\"n\":2}\n\ndata: [DONE]\n\n", string(rest))
}

func TestProxyNeedsItsToken(t *testing.T) {
	var seen atomic.Value
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Clone())
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(upstream.Close)
	base, _ := startProxy(t, oneUpstream(t, upstream.URL, `auth: "header:x-api-key", keys: [{secret: sk-upstream}]`))
	tests := []struct {
		name   string
		header map[string]string
		path   string
		status int
	}{
		{"no token", nil, "/v1/messages", http.StatusUnauthorized},
		{"wrong token", map[string]string{"X-Api-Key": "sk-upstream"}, "/v1/messages", http.StatusUnauthorized},
		{"bearer", map[string]string{"Authorization": "Bearer " + proxyToken}, "/v1/messages", http.StatusOK},
		{"x-api-key", map[string]string{"X-Api-Key": proxyToken}, "/v1/messages", http.StatusOK},
		{"query", nil, "/v1beta/models/g:generateContent?key=" + proxyToken, http.StatusOK},
		{"status without token", nil, "/status", http.StatusUnauthorized},
		{"healthz is open", nil, "/healthz", http.StatusOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			method := http.MethodPost
			if tt.path == "/status" || tt.path == "/healthz" {
				method = http.MethodGet
			}
			req, _ := http.NewRequest(method, base+tt.path, strings.NewReader("{}"))
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, tt.status, resp.StatusCode, "%s", b)
			if tt.status == http.StatusUnauthorized {
				assert.Contains(t, string(b), "needs its proxy token")
			}
		})
	}
	h := seen.Load().(http.Header)
	assert.Equal(t, "sk-upstream", h.Get("X-Api-Key"), "the upstream gets the pool's key")
	assert.Empty(t, h.Get("Authorization"), "the proxy token never reaches the upstream")
}

func TestProxyNoKeyAnswers429(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-a", ID: "a", Revoked: true}, {Secret: "sk-b", ID: "b", Revoked: true}}})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, simConfig(sim, t.TempDir(), `
      - {id: a, secret: sk-a}
      - {id: b, secret: sk-b}`))
	resp, err := chat(t, base, false)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "43200", resp.Header.Get("Retry-After"), "revoked keys come back in 12 hours")
	var body struct {
		Error struct {
			Type, Message string
			RetryAt       string `json:"retry_at"`
		}
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "rate_limit_error", body.Error.Type)
	assert.Contains(t, body.Error.Message, "no openai key available until")
	_, err = time.Parse(time.RFC3339, body.Error.RetryAt)
	assert.NoError(t, err)
}

func TestProxyKeepsStateAcrossRestart(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-a", ID: "a", Revoked: true}, {Secret: "sk-b", ID: "b"}}})
	t.Cleanup(sim.Close)
	state := t.TempDir()
	conf := simConfig(sim, state, `
      - {id: a, secret: sk-a}
      - {id: b, secret: sk-b}`)
	var c config
	require.NoError(t, yaml.Unmarshal([]byte(conf), &c))
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	for run := range 2 {
		srv, err := newServer(s, slog.New(slog.NewTextHandler(io.Discard, nil)))
		require.NoError(t, err)
		hs := httptest.NewServer(srv.handler())
		resp, err := chat(t, hs.URL, false)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		routes, err := fetchStatus(t.Context(), hs.URL, proxyToken)
		require.NoError(t, err)
		require.Len(t, routes, 1)
		assert.Equal(t, kindName(keypool.KindAuth), routes[0].Keys[0].Bench.Kind, "run %d: a is benched", run)
		hs.Close()
		srv.close()
	}
	a, _ := sim.StatsOf("a")
	assert.Equal(t, int64(1), a.Requests, "after the restart the revoked key is still benched: the vendor saw it once")

	var out bytes.Buffer
	require.NoError(t, printState(t.Context(), &out, state, true, 0))
	assert.Contains(t, out.String(), "benched (auth), back in")
}

func TestProxyMetrics(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{{Secret: "sk-a", ID: "a"}, {Secret: "sk-b", ID: "b"}}})
	t.Cleanup(sim.Close)
	base, _ := startProxy(t, simConfig(sim, t.TempDir(), `
      - {id: a, secret: sk-a}
      - {id: b, secret: sk-b}`))
	resp, err := chat(t, base, false)
	require.NoError(t, err)
	resp.Body.Close()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(b), `keypool_requests_total{`)
	assert.Contains(t, string(b), `keypool_keys_available{`)
	assert.NotContains(t, string(b), "sk-a")
}

// anyPort is a config's line that has serve listen on a free port, not on
// the default 127.0.0.1:8787, which another process may hold.
const anyPort = "listen: 127.0.0.1:0\n"

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	unreadable := filepath.Join(dir, "missing-keys.txt")
	controlFile := filepath.Join(dir, "control-keys.txt")
	require.NoError(t, os.WriteFile(controlFile, []byte("# keys\nsk-fine-1\nsk-bro\x00ken\n"), 0o600))
	tests := []struct {
		name, yaml, want string
	}{
		{"no upstreams", "proxy_tokens: [t]\n", "upstreams: missing"},
		{"no url", "proxy_tokens: [t]\nupstreams: [{name: x, keys: [{secret: s}]}]\n", "upstreams[0].url: missing"},
		{"bad url", "proxy_tokens: [t]\nupstreams: [{url: 'ftp://x', keys: [{secret: s}]}]\n", `upstreams[0].url: "ftp://x" is not an http or https URL`},
		{"unknown auth", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', auth: basic, keys: [{secret: s}]}]\n", `upstreams[0].auth: unknown style "basic"`},
		{"no keys", "proxy_tokens: [t]\nupstreams: [{url: 'https://x'}]\n", "upstreams[0].keys: no keys"},
		{"bad wait", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', wait: 3x, keys: [{secret: s}]}]\n", `upstreams[0].wait: "3x" is not a duration`},
		{"unreadable key file", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{file: " + unreadable + "}]}]\n", "upstreams[0].keys[0].file: open " + unreadable},
		{"missing env", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{env: NOPE_KEY}]}]\n", "upstreams[0].keys[0].env: NOPE_KEY is not set"},
		{"two sources", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s, env: E}]}]\n", "give exactly one of secret, env and file"},
		{"no proxy token", "upstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", "proxy_tokens: at least one token is required"},
		{"unknown field", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\nupstream: []\n", "upstream: unknown field; did you mean upstreams? (line 3)"},
		{"bad listen", "listen: nowhere\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", `listen: "nowhere" is not host:port`},
		{"replicas without redis", "proxy_tokens: [t]\nreplicas: 2\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", "replicas: needs a redis:// state to share"},
		{"state_timeout without redis", "proxy_tokens: [t]\nstate_timeout: 1s\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", "state_timeout: bounds the calls to a redis:// state; a directory has none"},
		{"bad state_timeout", "proxy_tokens: [t]\nstate_timeout: soon\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", `state_timeout: "soon" is not a duration such as 500ms`},
		{"state_timeout not positive", "proxy_tokens: [t]\nstate_timeout: 0s\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", "state_timeout: 0s is not positive"},
		{"bad zone", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', calendar_day: {zone: Mars/Olympus}, keys: [{secret: s}]}]\n", "upstreams[0].calendar_day.zone"},
		{"control character in a key file", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{file: " + controlFile + "}]}]\n",
			"upstreams[0].keys[0].file: control-keys.txt line 3: secret has a control character at byte 6"},
		{"control character inline", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: \"sk-in\\aline\"}]}]\n",
			"upstreams[0].keys[0].secret: secret has a control character at byte 5"},
		{"control character in a token", "proxy_tokens: [\"kp-\\tab\"]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			"proxy_tokens[0]: the token has a control character at byte 3"},
		{"bad body size", "max_request_body: 12 parsecs\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			`max_request_body: "12 parsecs" is not a size such as 32MiB`},
		{"body size of nothing", "max_request_body: 0\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			`max_request_body: "0" is not a size`},
		{"headers bounded below a request's", "max_header_bytes: 1KiB\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			`max_header_bytes: "1KiB" is not a size from 4KiB to 16MiB`},
		{"no pending connection", "max_pending_conns: 0\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			"max_pending_conns: 0 is not in 1..1048576"},
		{"an operator token that is a proxy token", "proxy_tokens: [kp-one, kp-two]\noperator_tokens: [op-one, kp-two]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			"operator_tokens[1]: the same token as proxy_tokens[1]: an operator's token is its own, apart from the clients'"},
		{"an operator token from an unset variable", "proxy_tokens: [t]\noperator_tokens: [\"env:NOPE_OPERATOR\"]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			"operator_tokens[0]: NOPE_OPERATOR is not set"},
		{"control character in an operator token", "proxy_tokens: [t]\noperator_tokens: [\"op-\\tab\"]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			"operator_tokens[0]: the token has a control character at byte 3"},
		{"a host with a scheme", "hosts: [keypool.internal, 'http://keypool.example/']\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			`hosts[1]: "http://keypool.example/" is not a host name such as keypool.example.com: give it without a scheme, port or path`},
		{"a host with a port", "hosts: ['keypool.internal:8787']\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			`hosts[0]: "keypool.internal:8787" is not a host name`},
		{"negative timeout", "header_timeout: -1s\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			`header_timeout: "-1s" is not a positive duration such as 10s`},
		{"bad shutdown timeout", "shutdown_timeout: soon\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n",
			`shutdown_timeout: "soon" is not a positive duration`},
		{"no idle connections", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', idle_conns: 0, keys: [{secret: s}]}]\n",
			"upstreams[0].idle_conns: 0 is not in 1..65536"},
		{"bad answer timeout", "proxy_tokens: [t]\nupstreams: [{url: 'https://x', answer_timeout: 0s, keys: [{secret: s}]}]\n",
			`upstreams[0].answer_timeout: "0s" is not a positive duration`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("c%d.yaml", i))
			conf := tt.yaml
			if !strings.Contains(conf, "listen:") {
				conf += anyPort // serve lists a port it cannot bind among the mistakes
			}
			require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
			var stdout, stderr bytes.Buffer
			status := run(t.Context(), []string{"serve", "-config", path}, &stdout, &stderr)
			assert.Equal(t, exitUsage, status)
			assert.Contains(t, stderr.String(), tt.want)
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr.String()), "\n")+1, "one line: %q", stderr.String())
			assert.NotContains(t, stderr.String(), "sk-", "no secret in the error")
		})
	}
}

func TestConfigStateHeldByAnotherProcess(t *testing.T) {
	state := t.TempDir()
	held, err := keypool.OpenBadgerStore(state)
	require.NoError(t, err)
	defer held.Close()
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(anyPort+"proxy_tokens: [t]\nstate: "+state+"\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n"), 0o600))
	var stdout, stderr bytes.Buffer
	assert.Equal(t, exitUsage, run(t.Context(), []string{"serve", "-config", path}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "state: keypool: badger store "+state+": state directory is held by another process")
}

func TestConfigWarnsOfReadableSecrets(t *testing.T) {
	dir := t.TempDir()
	path, keys := filepath.Join(dir, "c.yaml"), filepath.Join(dir, "keys.txt")
	require.NoError(t, os.WriteFile(keys, []byte("sk-from-file\n"), 0o640))
	require.NoError(t, os.WriteFile(path, []byte("proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: sk-inline}, {file: "+keys+"}]}, {url: 'https://y', keys: [{file: "+keys+"}]}]\n"), 0o644))
	readable := func() []string {
		s, err := loadConfig(path, os.LookupEnv)
		require.NoError(t, err)
		var found []string
		for _, w := range s.warnings {
			if strings.Contains(w, "readable by others") {
				found = append(found, w)
				assert.NotContains(t, w, "sk-", "no secret in a warning")
			}
		}
		return found
	}
	assert.Equal(t, []string{
		path + " holds secrets and is readable by others (mode 0644); chmod 600 it",
		keys + " holds secrets and is readable by others (mode 0640); chmod 600 it",
	}, readable(), "the configuration with a secret inline, and the key file, once")
	require.NoError(t, os.Chmod(path, 0o600))
	require.NoError(t, os.Chmod(keys, 0o600))
	assert.Empty(t, readable())
}

func TestConfigWarnsOfWeakTokens(t *testing.T) {
	warnings := func(conf string) []string {
		c, err := parseConfig([]byte(conf+"upstreams: [{url: 'https://x', keys: [{secret: sk-a}]}]\n"), "c.yaml")
		require.NoError(t, err)
		s, err := c.resolve(func(name string) (string, bool) { return "short", name == "SHORT" })
		require.NoError(t, err)
		return s.warnings
	}
	assert.Equal(t, []string{
		"proxy_tokens[1] is 1 character long: a token shorter than 16 may be guessed; use a long random one (openssl rand -hex 32)",
		"proxy_tokens[2] is 15 characters long: a token shorter than 16 may be guessed; use a long random one (openssl rand -hex 32)",
		"operator_tokens[1] is 5 characters long: a token shorter than 16 may be guessed; use a long random one (openssl rand -hex 32)",
	}, warnings("proxy_tokens: [kp-sixteen-chars, t, kp-fifteen-char]\noperator_tokens: [op-sixteen-chars, env:SHORT]\n"),
		"each token under 16 characters, by its place, never its value")
	assert.Equal(t, []string{
		"operator_tokens is not set: every proxy token may read /status, /metrics and the status page, and unbench keys; give operators tokens of their own in operator_tokens",
	}, warnings("proxy_tokens: [kp-a-long-proxy-token]\n"), "without operator tokens, proxy tokens read the page: said at start")
}

func TestConfigKeysFromEnvAndFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keys.txt")
	require.NoError(t, os.WriteFile(file, []byte("# keys\n  sk-file-1 \r\n\n\tsk-file-2\n"), 0o600))
	var c config
	require.NoError(t, yaml.Unmarshal([]byte(`
proxy_tokens: ["env:PROXY"]
upstreams:
  - url: https://api.example.com
    keys:
      - {env: KEY_ONE, id: one}
      - {file: `+file+`, id: f, paid: true}
`), &c))
	env := map[string]string{"PROXY": "pt\n", "KEY_ONE": "sk-env\n"}
	s, err := c.resolve(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.NoError(t, err)
	require.Len(t, s.routes, 1)
	keys := s.routes[0].keys
	require.Len(t, keys, 3)
	assert.Equal(t, []string{"sk-env", "sk-file-1", "sk-file-2"}, []string{keys[0].Secret, keys[1].Secret, keys[2].Secret},
		"a key read from the environment or a file loses the whitespace around it")
	assert.Equal(t, []string{"one", "f-1", "f-2"}, []string{keys[0].ID, keys[1].ID, keys[2].ID})
	assert.True(t, keys[2].Paid)
	assert.Equal(t, "api.example.com", s.routes[0].name)
	assert.Equal(t, [][]byte{[]byte("pt")}, s.tokens)

	for name, value := range map[string]string{"a control character": "sk-env\x1bkey", "only whitespace": " \n"} {
		t.Run(name, func(t *testing.T) {
			env["KEY_ONE"] = value
			_, err := c.resolve(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "upstreams[0].keys[0].env: "), "%v", err)
			assert.NotContains(t, err.Error(), "sk-env", "the error never shows the key")
		})
	}
}

func TestProxyFallsBackAcrossVendors(t *testing.T) {
	simA := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{{Secret: "sk-a", ID: "a", Limits: vendorsim.Limits{RPD: 1}}}})
	simB := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{{Secret: "sk-b", ID: "b", Limits: vendorsim.Limits{RPD: 2}}}})
	t.Cleanup(simA.Close)
	t.Cleanup(simB.Close)
	base, _ := startProxy(t, fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - {name: free-a, url: %s, limits: {rpd: 1}, keys: [{id: a, secret: sk-a}]}
  - {name: free-b, url: %s, limits: {rpd: 2}, keys: [{id: b, secret: sk-b}], models: {gpt-4o-mini: other-model}}
`, proxyToken, t.TempDir(), simA.URL(), simB.URL()))
	for i := range 3 {
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d: no caller-visible failure while a route has quota", i)
	}
	assert.Equal(t, int64(1), simA.Totals().Served)
	assert.Equal(t, int64(2), simB.Totals().Served)
	resp, err := chat(t, base, false)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", b)
	routes, err := fetchStatus(t.Context(), base, proxyToken)
	require.NoError(t, err)
	require.Len(t, routes, 2)
	soonest := routes[0].BenchedUntil
	if routes[1].BenchedUntil.Before(soonest) {
		soonest = routes[1].BenchedUntil
	}
	want := int64(time.Until(soonest).Seconds())
	got, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
	require.NoError(t, err)
	assert.InDelta(t, want, got, 2, "Retry-After is the soonest return of any route")
	assert.Contains(t, string(b), "no free-a/free-b key available until")
}

func TestREADMEConfigExample(t *testing.T) {
	example := readmeYAML(t, "")
	keys := filepath.Join(t.TempDir(), "openrouter-keys")
	require.NoError(t, os.WriteFile(keys, []byte("sk-or-1\nsk-or-2\n"), 0o600))
	example = strings.ReplaceAll(example, "/run/secrets/openrouter-keys", keys)
	var c config
	dec := yaml.NewDecoder(strings.NewReader(example))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&c))
	s, err := c.resolve(func(name string) (string, bool) { return "value-of-" + name, true })
	require.NoError(t, err)
	require.Len(t, s.routes, 3)
	assert.Equal(t, []string{"groq", "openrouter", "openai"}, []string{s.routes[0].name, s.routes[1].name, s.routes[2].name})
	assert.True(t, s.routes[2].keys[0].Paid, "the paid vendor is last")
}

// readmeYAML returns the README's first YAML block after the text after.
func readmeYAML(t *testing.T, after string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(readme), after)
	require.True(t, ok, "the README has %q", after)
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	require.True(t, ok, "the README has a YAML block after %q", after)
	block, _, _ := strings.Cut(rest, "```")
	return block
}

func TestREADMEDefaults(t *testing.T) {
	block := readmeYAML(t, "### Every setting, with its default\n")
	resolve := func(text string) *settings {
		var c config
		dec := yaml.NewDecoder(strings.NewReader(text))
		dec.KnownFields(true)
		require.NoError(t, dec.Decode(&c))
		s, err := c.resolve(func(string) (string, bool) { return "", false })
		require.NoError(t, err)
		return s
	}
	documented := resolve(block)
	defaults := resolve("proxy_tokens: [t]\nupstreams: [{url: 'https://api.example.com', keys: [{secret: s}]}]\n")
	documented.routes[0].options, defaults.routes[0].options = nil, nil // functions: never equal
	documented.stateDefault = defaults.stateDefault                     // written out, the same value
	assert.Equal(t, defaults, documented, "the README's values are the defaults")
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestServeShutsDownGracefully(t *testing.T) {
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-a", ID: "a", Revoked: true}, {Secret: "sk-b", ID: "b"}}})
	t.Cleanup(sim.Close)
	state := t.TempDir()
	path := filepath.Join(t.TempDir(), "keypool.yaml")
	conf := "listen: 127.0.0.1:0\n" + simConfig(sim, state, "      - {id: a, secret: sk-a}\n      - {id: b, secret: sk-b}")
	require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))

	ctx, stop := context.WithCancel(t.Context())
	var stdout, stderr syncBuffer
	done := make(chan int)
	go func() { done <- run(ctx, []string{"serve", "-config", path}, &stdout, &stderr) }()
	var addr string
	require.Eventually(t, func() bool {
		_, rest, ok := strings.Cut(stderr.String(), "addr=")
		addr, _, _ = strings.Cut(rest, " ")
		return ok
	}, 5*time.Second, 10*time.Millisecond, "the proxy did not start: %s", stderr.String())
	resp, err := chat(t, "http://"+addr, false)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	stop()
	select {
	case status := <-done:
		assert.Equal(t, 0, status, "stderr: %s", stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not stop")
	}
	assert.Contains(t, stderr.String(), "stopped")
	assert.Contains(t, stderr.String(), `level=WARN msg="operator_tokens is not set: every proxy token may read /status`, "said at start")
	var out bytes.Buffer
	require.NoError(t, printState(t.Context(), &out, state, true, 0), "the state directory is free again")
	assert.Contains(t, out.String(), "benched (auth), back in", "the bench was written")
}

func TestProxyReplicasShareRedisState(t *testing.T) {
	mr := miniredis.RunT(t)
	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{{Secret: "sk-a", ID: "a"}}})
	t.Cleanup(sim.Close)
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
state: redis://%s/0
replicas: 2
upstreams:
  - {name: openai, url: %s, limits: {rpm: 3}, keys: [{id: a, secret: sk-a}, {id: b, secret: sk-b}]}
`, proxyToken, mr.Addr(), sim.URL())
	first, _ := startProxy(t, conf)
	second, _ := startProxy(t, conf)
	statuses := map[int]int{}
	for i := range 8 {
		base := first
		if i%2 == 1 {
			base = second
		}
		resp, err := chat(t, base, false)
		require.NoError(t, err)
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 3, http.StatusTooManyRequests: 5}, statuses,
		"two replicas share key a's RPM 3 (b is unknown to the vendor and benched at once)")
}

// TestConfigStateTimeout: a redis:// state's state_timeout is read into
// the settings openState gives redisstore.WithTimeout.
func TestConfigStateTimeout(t *testing.T) {
	var c config
	require.NoError(t, yaml.Unmarshal([]byte("proxy_tokens: [t]\nstate: redis://127.0.0.1:1/0\nstate_timeout: 250ms\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n"), &c))
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	assert.Equal(t, 250*time.Millisecond, s.stateTimeout)
}

func TestProxyRefusalsNameTheConfigurationsFields(t *testing.T) {
	upstream, reached := countingUpstream(t)
	base, _ := startProxy(t, oneUpstream(t, upstream,
		"prices: {gpt-4o-mini: {input: 1, output: 1000}}, keys: [{id: a, secret: sk-a, budget: {per_day: 0.01}}]"))
	tests := []struct{ name, body, want, not string }{
		{"a model without a price", `{"model":"gpt-4o","messages":[]}`, `model \"gpt-4o\" has no price in the upstream's prices`, "WithPrices"},
		{"a request that could cost more than a budget", `{"model":"gpt-4o-mini","max_tokens":100000,"messages":[]}`, "the model's max_output in the upstream's prices", "MaxOutput"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+proxyToken)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
			assert.Contains(t, string(b), tt.want)
			assert.NotContains(t, string(b), tt.not, "a Go option, which a proxy's client cannot set")
		})
	}
	assert.Zero(t, reached.Load(), "nothing reached the upstream")
}
