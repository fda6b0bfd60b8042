package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

// configField matches the fields configuration errors name: "config", or a
// path as the file writes it — names, list indices, and map keys that are
// names or quoted — such as upstreams[1].model_limits["a/b"].rpm.
var configField = regexp.MustCompile(`^(config|([A-Za-z0-9_-]+|\["(\\.|[^"\\])*…?"\])(\[\d+\]|\["(\\.|[^"\\])*…?"\]|\.[A-Za-z0-9_-]+)*)$`)

// The secrets a fuzzed configuration gets from its environment and its key
// file; the marks stand for the secrets it writes inline.
const (
	fuzzEnvSecret  = "env-secret-3b8f1c"
	fuzzFileSecret = "file-secret-9d2e7a"
	fuzzMark       = "inline-secret-5c4a0e-"
)

// FuzzConfig reads arbitrary configuration files as keypool serve does:
// parsing, checking and reading secrets, then building each route's pool.
// Nothing panics; every error is one line that starts with the field it
// names; and no error shows a secret — one written in the file, read from
// the environment or read from a key file.
func FuzzConfig(f *testing.F) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(f, err)
	_, rest, _ := strings.Cut(string(readme), "```yaml\n")
	example, _, _ := strings.Cut(rest, "```")
	f.Add([]byte(example))
	for _, seed := range []string{
		"proxy_tokens: [t]\nupstreams: [{name: x, url: 'https://x', keys: [{secret: sk-a}, {secret: sk-a}]}]\n",
		"proxy_tokens: [env:SET]\nupstreams: [{url: 'https://x', auth: 'query:key', keys: [{env: SET}, {file: keys.txt, id: f}]}]\n",
		"proxy_tokens: [t]\nupstreams: [{url: 'https://x', limits: {rpm: -1}, keys: [{secret: s, limits: {tpd: 5}}]}]\n",
		"proxy_tokens: [t]\nupstreams: [{url: 'https://x', calendar_day: {hour: 25, zone: UTC}, wait: 1s, keys: [{secret: s}]}]\n",
		"proxy_tokens: [t]\nupstreams: [{url: 'https://x', model_limits: {m: {rpd: 3}}, key_cap: {rpd: 1}, keys: [{secret: s}]}]\n",
		"max_request_body: 8MiB\nheader_timeout: 5s\nshutdown_timeout: 1s\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', idle_conns: 64, answer_timeout: 2m, keys: [{secret: s}]}]\n",
		"proxy_tokens: ['']\n", "listen: ':0'\nstate: /tmp/x\n", "upstreams: [{keys: [{secret: s, env: E}]}]\n", "",
	} {
		f.Add([]byte(seed))
	}
	dir := f.TempDir()
	keyFile := filepath.Join(dir, "keys.txt")
	require.NoError(f, os.WriteFile(keyFile, []byte("# keys\n"+fuzzFileSecret+"\n\n"+fuzzFileSecret+"-2\n"), 0o600))
	env := func(name string) (string, bool) {
		if name == "SET" || name == "GROQ_KEY_1" || name == "OPENAI_KEY" {
			return fuzzEnvSecret + name, true
		}
		return "", false
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, secret := range []string{fuzzMark, fuzzEnvSecret, fuzzFileSecret} {
			if strings.Contains(string(data), secret) {
				return // a secret's text in the file: an error may rightly show it
			}
		}
		c, err := parseConfig(data, "keypool.yaml")
		if err != nil {
			checkConfigError(t, data, err)
			return
		}
		// The fuzzer reads no file of the machine: keys.txt is the key
		// file, and every other name is missing.
		for i := range c.Upstreams {
			for j := range c.Upstreams[i].Keys {
				k := &c.Upstreams[i].Keys[j]
				switch {
				case k.File == "keys.txt":
					k.File = keyFile
				case k.File != "":
					k.File = filepath.Join(dir, "missing", strings.ReplaceAll(k.File, "/", "_"))
				}
			}
		}
		// Inline secrets become marks, so that an error that shows one is
		// seen whatever the secret's text.
		marks := map[string]string{}
		mark := func(v string) string {
			if v == "" {
				return v
			}
			if m, ok := marks[v]; ok {
				return m
			}
			marks[v] = fmt.Sprintf("%s%d", fuzzMark, len(marks))
			return marks[v]
		}
		for i, tok := range c.ProxyTokens {
			if !strings.HasPrefix(string(tok), "env:") {
				c.ProxyTokens[i] = secretRef(mark(string(tok)))
			}
		}
		for i := range c.Upstreams {
			for j := range c.Upstreams[i].Keys {
				k := &c.Upstreams[i].Keys[j]
				k.Secret = mark(k.Secret)
			}
		}
		s, err := c.resolve(env)
		if err != nil {
			checkConfigError(t, data, err)
			return
		}
		for _, r := range s.routes {
			p, err := keypool.New(r.name, r.keys, r.options...)
			if err != nil {
				checkSecretFree(t, data, "keypool.New", err.Error())
				continue
			}
			require.NoError(t, p.Close())
		}
	})
}

// checkConfigError fails t unless err is mistakes, each one line that
// names a field of the configuration data and shows no secret.
func checkConfigError(t *testing.T, data []byte, err error) {
	t.Helper()
	var list mistakes
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("configuration %q: error %q is not a list of mistakes", data, err)
	}
	for _, e := range list {
		msg := e.Error()
		if strings.ContainsAny(msg, "\r\n") {
			t.Fatalf("configuration %q: mistake %q is more than one line", data, msg)
		}
		var ce *configError
		if !errors.As(e, &ce) || !configField.MatchString(ce.field) || !strings.HasPrefix(msg, ce.field+": ") {
			t.Fatalf("configuration %q: mistake %q names no field", data, msg)
		}
		checkSecretFree(t, data, "error", msg)
	}
}

// checkSecretFree fails t if text shows a secret of the fuzzed
// configuration.
func checkSecretFree(t *testing.T, data []byte, what, text string) {
	t.Helper()
	for _, secret := range []string{fuzzMark, fuzzEnvSecret, fuzzFileSecret} {
		if strings.Contains(text, secret) {
			t.Fatalf("configuration %q: %s %q shows a secret", data, what, text)
		}
	}
}
