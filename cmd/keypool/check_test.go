package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/keypool-go/keypool"
)

// writeConfig writes conf as keypool.yaml in a directory of its own, with
// the files named in files beside it, and returns its path.
func writeConfig(t *testing.T, conf string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600))
	}
	path := filepath.Join(dir, "keypool.yaml")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(conf, "DIR", dir)), 0o600))
	return path
}

// runCommand runs keypool with args and the environment variables env set,
// and returns the exit status and what it wrote.
func runCommand(t *testing.T, env map[string]string, args ...string) (status int, stdout, stderr string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	var out, errOut bytes.Buffer
	status = run(t.Context(), args, &out, &errOut)
	return status, out.String(), errOut.String()
}

// lines returns the lines of text, without the empty last one.
func lines(text string) []string {
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}

// manyMistakes is a configuration with a mistake of every kind check
// finds, each on its own line of the answer; DIR is its directory.
const manyMistakes = `
proxy_tokens: ["env:CHECK_TEST_TOKEN"]
state: DIR/taken/state
log_level: loud
upstreams:
  - name: groq
    url: https://api.groq.com/openai
    limit: {rpm: 30}
    limits: {rpm: -30, tpd: lots}
    keys:
      - {env: CHECK_TEST_GROQ_1}
      - {env: CHECK_TEST_GROQ_2}
      - {secret: sk-check-dup}
      - {file: DIR/openrouter-keys}
      - {secret: "sk-check-tab\tinside"}
      - {secret: sk-check-acct, account: org-a, limits: {rpm: 3}}
    account_limits: {org-b: {rpm: 3}}
  - name: groq
    url: ftp://example.com
    auth: "header:"
    calendar_day: {hour: 25, zone: UTC}
    keys: [{secret: sk-check-a, id: same}, {secret: sk-check-b, id: same}]
operator_tokens: [op-token-of-the-check-test]
listen: 127.0.0.1:0
`

// manyMistakesLines are the lines check and serve answer manyMistakes
// with, less their "keypool COMMAND: " prefix.
var manyMistakesLines = []string{
	"upstreams[0].limit: unknown field; did you mean limits? (line 8)",
	`upstreams[0].limits.tpd: "lots" is not a whole number (line 9)`,
	`log_level: "loud" is not debug, info, warn or error`,
	"proxy_tokens[0]: CHECK_TEST_TOKEN is not set",
	"upstreams[0].limits.rpm: -30 is negative",
	"upstreams[0].keys[1].env: CHECK_TEST_GROQ_2 is not set",
	"upstreams[0].keys[5].limits: a key of an account has no limits of its own: set the account's in account_limits.org-a",
	`upstreams[0].account_limits.org-b: no key of this upstream names the account "org-b"`,
	"upstreams[0].keys[4].secret: secret has a control character at byte 12",
	"upstreams[0].keys[2].secret: the same secret as upstreams[0].keys[0].env (CHECK_TEST_GROQ_1)",
	"upstreams[0].keys[3].file: openrouter-keys line 3: the same secret as upstreams[0].keys[0].env (CHECK_TEST_GROQ_1)",
	"upstreams[1].auth: needs a header name",
	"upstreams[1].calendar_day.hour: hour 25 is not in 0..23",
	`upstreams[1].keys[1].id: "same" is also the ID of upstreams[1].keys[0].secret`,
	`upstreams[1].url: "ftp://example.com" is not an http or https URL`,
	`upstreams[1].name: "groq" also names upstreams[0]: give each upstream a name of its own`,
	"state: DIR/taken/state cannot be made: DIR/taken is not a directory",
}

func TestCheckListsEveryMistake(t *testing.T) {
	path := writeConfig(t, manyMistakes, map[string]string{
		"openrouter-keys": "sk-check-or-1\n# a comment\nsk-check-dup\n",
		"taken":           "a file where the state's directory would be\n",
	})
	dir := filepath.Dir(path)
	env := map[string]string{"CHECK_TEST_GROQ_1": "sk-check-dup\n"}
	for _, command := range []string{"check", "serve"} {
		t.Run(command, func(t *testing.T) {
			status, stdout, stderr := runCommand(t, env, command, "-config", path)
			assert.Equal(t, exitUsage, status)
			assert.Empty(t, stdout)
			var want []string
			for _, l := range manyMistakesLines {
				want = append(want, "keypool "+command+": "+strings.ReplaceAll(l, "DIR", dir))
			}
			assert.Equal(t, want, lines(stderr), "every mistake, one a line, in this order")
			for _, text := range []string{"main.", "type ", "sk-check-"} {
				assert.NotContains(t, stderr, text, "no Go type and no secret in a mistake")
			}
		})
	}
	_, err := os.Stat(filepath.Join(dir, "taken", "state"))
	assert.Error(t, err, "nothing was made")
}

func TestCheckSaysAGoodConfigIsGood(t *testing.T) {
	path := writeConfig(t, "proxy_tokens: [kp-token-of-the-check-test]\noperator_tokens: [op-token-of-the-check-test]\nupstreams: [{url: 'https://x.example', keys: [{secret: sk-a}, {env: CHECK_TEST_KEY}]}]\n", nil)
	cwd, err := os.Getwd()
	require.NoError(t, err)
	t.Chdir(t.TempDir())
	status, stdout, stderr := runCommand(t, map[string]string{"CHECK_TEST_KEY": "sk-b"}, "check", "-config", path)
	assert.Equal(t, 0, status, stderr)
	assert.Empty(t, stderr)
	wd, _ := os.Getwd()
	assert.Equal(t, path+": no mistakes: 1 upstream, 2 keys; state in "+filepath.Join(wd, "keypool-state")+" (Badger; the default, as state is not set)\n", stdout)
	assert.NoDirExists(t, filepath.Join(wd, "keypool-state"), "check makes no state")
	require.NoError(t, os.Chdir(cwd))
}

func TestConfigNamesUnknownFieldsAsWritten(t *testing.T) {
	tests := []struct{ name, yaml, want string }{
		{"top level", "proxy_token: [t]\n", "proxy_token: unknown field; did you mean proxy_tokens? (line 1)"},
		{"an upstream's", "upstreams: [{url: 'https://x', keys: [{secret: s}], limit: {rpm: 3}}]\n", "upstreams[0].limit: unknown field; did you mean limits? (line 1)"},
		{"a key's", "upstreams:\n  - url: https://x\n    keys:\n      - {secret: s, colour: red}\n", "upstreams[0].keys[0].colour: unknown field (line 4)"},
		{"in limits", "upstreams: [{url: 'https://x', keys: [{secret: s}], limits: {rps: 3}}]\n", "upstreams[0].limits.rps: unknown field; did you mean rpd or rpm? (line 1)"},
		{"in a model's limits", "upstreams: [{url: 'https://x', keys: [{secret: s}], model_limits: {llama-3.1-8b: {rpn: 3}}}]\n",
			`upstreams[0].model_limits["llama-3.1-8b"].rpn: unknown field; did you mean rpd or rpm? (line 1)`},
		{"in an account's limits", "upstreams: [{url: 'https://x', keys: [{secret: s, account: a}], account_limits: {a: {tmp: 3}}}]\n",
			"upstreams[0].account_limits.a.tmp: unknown field; did you mean tpd or tpm? (line 1)"},
		{"a name with spaces", "\"proxy tokens\": [t]\n", `["proxy tokens"]: unknown field; did you mean proxy_tokens? (line 1)`},
		{"far from any", "upstreams: [{url: 'https://x', keys: [{secret: s}], colour: red}]\n", "upstreams[0].colour: unknown field (line 1)"},
		{"given twice", "listen: ':1'\nlisten: ':2'\n", "listen: given twice (first at line 1) (line 2)"},
		{"a list for a value", "listen: [a]\n", "listen: want a single value, not a list (line 1)"},
		{"a value for a list", "upstreams: x\n", `upstreams: want a list, not "x" (line 1)`},
		{"not a mapping", "- a\n", "config: want a mapping of settings, not a list (line 1)"},
		{"a number", "upstreams: [{url: 'https://x', idle_conns: many, keys: [{secret: s}]}]\n", `upstreams[0].idle_conns: "many" is not a whole number (line 1)`},
		{"a boolean", "upstreams: [{url: 'https://x', keys: [{secret: s, paid: maybe}]}]\n", `upstreams[0].keys[0].paid: "maybe" is not true or false (line 1)`},
		{"not YAML", "listen: [\n", "config: keypool.yaml: line 1: did not find expected node content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseConfig([]byte(tt.yaml), "keypool.yaml")
			require.Error(t, err)
			assert.Equal(t, tt.want, lines(err.Error())[0])
			assert.NotContains(t, err.Error(), "main.")
		})
	}
}

func TestConfigAliasesAndMerges(t *testing.T) {
	_, err := parseConfig([]byte(`
common: &common {url: 'https://x', keys: [{secret: s}]}
`), "k")
	require.Error(t, err, "an unknown field, even one used for an anchor")
	c, err := parseConfig([]byte(`
upstreams:
  - &first {name: a, url: 'https://x', keys: [{secret: s}], limits: {rpm: 3}}
  - {<<: *first, name: b}
`), "k")
	require.NoError(t, err)
	require.Len(t, c.Upstreams, 2)
	assert.Equal(t, "b", c.Upstreams[1].Name, "a key beside a merge overrides it")
	assert.Equal(t, int64(3), c.Upstreams[1].Limits.RPM)
	for _, doc := range []string{"upstreams: &u [*u]\n", "&a {<<: *a}\n", "a: &a [*a, *a, *a, *a]\nb: &b [*a, *a, *a, *a]\nc: &c [*b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n"} {
		_, err := parseConfig([]byte(doc), "k")
		assert.Error(t, err, "a loop or a flood of aliases ends: %q", doc)
	}
}

func TestConfigDuplicateSecretsAcrossSources(t *testing.T) {
	path := writeConfig(t, `
proxy_tokens: [t]
upstreams:
  - name: a
    url: https://a.example
    keys:
      - {secret: sk-dup-1}
      - {env: DUP_TEST_KEY}
      - {file: DIR/keys}
      - {secret: sk-dup-2}
  - name: b
    url: https://b.example
    keys: [{secret: sk-dup-1}]  # another upstream may hold the same key
`, map[string]string{"keys": "sk-dup-1\nsk-other\n\nsk-dup-2\n"})
	t.Setenv("DUP_TEST_KEY", "sk-dup-2")
	_, err := loadConfig(path, os.LookupEnv)
	require.Error(t, err)
	assert.Equal(t, []string{
		"upstreams[0].keys[2].file: keys line 1: the same secret as upstreams[0].keys[0].secret",
		"upstreams[0].keys[2].file: keys line 4: the same secret as upstreams[0].keys[1].env (DUP_TEST_KEY)",
		"upstreams[0].keys[3].secret: the same secret as upstreams[0].keys[1].env (DUP_TEST_KEY)",
	}, lines(err.Error()))
}

func TestConfigLeavesKeyRulesToTheLibrary(t *testing.T) {
	// Each reason is keypool.New's, found by asking it; the command only
	// names the field.
	tests := []struct {
		name, keys, want string
		library          []keypool.Key
	}{
		{"white space around a secret", `[{secret: " sk-a"}, {secret: sk-b}]`, "upstreams[0].keys[0].secret: ",
			[]keypool.Key{{Secret: " sk-a"}}},
		{"a control character in an ID", `[{secret: sk-a, id: "a\tb"}, {secret: sk-b}]`, "upstreams[0].keys[0].id: ",
			[]keypool.Key{{Secret: "sk-a", ID: "a\tb"}}},
		{"a control character in an account", `[{secret: sk-a, account: "a\tb"}, {secret: sk-b}]`, "upstreams[0].keys[0].account: ",
			[]keypool.Key{{Secret: "sk-a", Account: "a\tb"}}},
		{"two keys of one ID", `[{secret: sk-a, id: x}, {secret: sk-b, id: x}]`, `upstreams[0].keys[1].id: "x" is also the ID of upstreams[0].keys[0].secret`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig([]byte("proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: "+tt.keys+"}]\n"), "k")
			require.NoError(t, err)
			_, err = c.resolve(func(string) (string, bool) { return "", false })
			require.Error(t, err)
			want := tt.want
			if tt.library != nil {
				_, lib := keypool.New("x", tt.library)
				require.Error(t, lib)
				want += innermost(lib).Error()
			}
			assert.Equal(t, []string{want}, lines(err.Error()))
		})
	}
}

func TestConfigKeyIDsSayWhereKeysCameFrom(t *testing.T) {
	path := writeConfig(t, `
proxy_tokens: [t]
upstreams:
  - url: https://x.example
    keys:
      - {env: GROQ_KEY_1}
      - {file: DIR/openrouter-keys}
      - {secret: sk-inline}
      - {secret: sk-named, id: mine}
      - {file: DIR/more-keys, id: more}
`, map[string]string{"openrouter-keys": "# keys\nsk-or-1\n\nsk-or-2\n", "more-keys": "sk-m-1\nsk-m-2\n"})
	t.Setenv("GROQ_KEY_1", "sk-groq")
	s, err := loadConfig(path, os.LookupEnv)
	require.NoError(t, err)
	var ids []string
	for _, k := range s.routes[0].keys {
		ids = append(ids, k.ID)
	}
	assert.Equal(t, []string{"GROQ_KEY_1", "openrouter-keys:2", "openrouter-keys:4", "upstreams[0].keys[2]", "mine", "more-1", "more-2"}, ids)
	for _, k := range s.routes[0].keys {
		p, err := keypool.New("x", []keypool.Key{{Secret: k.Secret}})
		require.NoError(t, err)
		assert.NotEqual(t, p.Stats()[0].ID, k.ID, "an ID is never the secret's hash")
		require.NoError(t, p.Close())
	}
}

func TestConfigAccounts(t *testing.T) {
	tests := []struct{ name, upstream, want string }{
		{"fine", `keys: [{secret: a, account: org}, {secret: b, account: org}], account_limits: {org: {rpm: 2, tpd: 1000}}`, ""},
		{"limits of an account's key", `keys: [{secret: a, account: org, limits: {rpm: 1}}]`,
			"upstreams[0].keys[0].limits: a key of an account has no limits of its own: set the account's in account_limits.org"},
		{"limits of an account no key names", `keys: [{secret: a, account: org}], account_limits: {orgg: {rpm: 2}}`,
			`upstreams[0].account_limits.orgg: no key of this upstream names the account "orgg"`},
		{"a negative limit of an account", `keys: [{secret: a, account: org}], account_limits: {org: {rpd: -2}}`,
			"upstreams[0].account_limits.org.rpd: -2 is negative"},
		{"an account's name the library refuses", "keys: [{secret: a, account: \"o\\x01rg\"}], account_limits: {\"o\\x01rg\": {rpm: 2}}",
			`upstreams[0].account_limits["o\x01rg"]: the account has a control character at byte 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig([]byte("proxy_tokens: [t]\nupstreams: [{url: 'https://x', "+tt.upstream+"}]\n"), "k")
			require.NoError(t, err)
			s, err := c.resolve(func(string) (string, bool) { return "", false })
			if tt.want == "" {
				require.NoError(t, err)
				assert.Equal(t, "org", s.routes[0].keys[1].Account)
				return
			}
			require.Error(t, err)
			assert.Contains(t, lines(err.Error()), tt.want)
		})
	}
}

func TestCheckStateDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	tests := []struct{ name, state, want string }{
		{"a directory", dir, ""},
		{"one to make", filepath.Join(dir, "a", "b"), ""},
		{"a file", file, "state: " + file + " is not a directory"},
		{"under a file", filepath.Join(file, "state"), "state: " + filepath.Join(file, "state") + " cannot be made: " + file + " is not a directory"},
	}
	if os.Geteuid() != 0 { // root writes anywhere
		ro := filepath.Join(dir, "read-only")
		require.NoError(t, os.Mkdir(ro, 0o500))
		tests = append(tests, struct{ name, state, want string }{"read-only", ro, "state: " + ro + " is not writable: permission denied"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkState(&settings{state: tt.state}, slog.New(slog.DiscardHandler))
			if tt.want == "" {
				assert.NoError(t, err)
				assert.NoDirExists(t, filepath.Join(dir, "a"), "nothing made")
				entries, _ := os.ReadDir(dir)
				assert.Len(t, entries, 1, "nothing left")
				return
			}
			require.Error(t, err)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestCheckRedisOutOfReachIsOneLine(t *testing.T) {
	mr := miniredis.RunT(t)
	addr := mr.Addr()
	mr.Close() // nothing listens there now
	conf := fmt.Sprintf("proxy_tokens: [kp-token-of-the-check-test]\noperator_tokens: [op-token-of-the-check-test]\nstate: redis://:hunter2@%s/0\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", addr)
	path := writeConfig(t, conf, nil)
	// As a process: go-redis logs through the standard logger, to the
	// process's stderr.
	out, err := exec.Command(keypoolBinary(t), "check", "-config", path).CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, exitUsage, exit.ExitCode())
	assert.Regexp(t, `^keypool check: state: redisstore: redis unavailable: .*connection refused\n$`, string(out), "one line, no client log")
	assert.NotContains(t, string(out), "hunter2")

	path = writeConfig(t, "replicas: 2\n"+conf, nil)
	out, err = exec.Command(keypoolBinary(t), "check", "-config", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := lines(string(out))
	require.Len(t, got, 2, "%s", out)
	assert.Regexp(t, `^keypool check: warning: state: redisstore: redis unavailable: .*; serve would start on local windows at 1/2 of every limit until it answers$`, got[0])
	assert.True(t, strings.HasPrefix(got[1], path+": no mistakes"), got[1])

	mr = miniredis.RunT(t)
	path = writeConfig(t, "state: redis://"+mr.Addr()+"/0\nproxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", nil)
	status, stdout, stderr := runCommand(t, nil, "check", "-config", path)
	assert.Equal(t, 0, status, stderr)
	assert.Equal(t, path+": no mistakes: 1 upstream, 1 key; state in redis://"+mr.Addr()+"/0 (Redis)\n", stdout)
}

func TestMistakesAreBounded(t *testing.T) {
	var keys strings.Builder
	for i := range 3 * maxMistakes {
		fmt.Fprintf(&keys, "%s{env: BOUND_TEST_%d}", map[bool]string{true: ", "}[i > 0], i)
	}
	c, err := parseConfig([]byte("proxy_tokens: [t]\nupstreams: [{url: 'https://x', keys: ["+keys.String()+"]}]\n"), "k")
	require.NoError(t, err)
	_, err = c.resolve(func(string) (string, bool) { return "", false })
	got := lines(err.Error())
	assert.Len(t, got, maxMistakes+1)
	assert.Equal(t, fmt.Sprintf("… and %d more mistakes", 2*maxMistakes), got[maxMistakes])
	assert.True(t, slices.ContainsFunc(got, func(l string) bool { return strings.Contains(l, "BOUND_TEST_0 is not set") }))
}

func TestCheckSaysTheLineOfAYAMLMistake(t *testing.T) {
	tests := []struct{ name, conf, want string }{
		{"a line indented less than its block", "proxy_tokens: [t]\nupstreams:\n  - name: a\n    url: https://x\n   keys: [{secret: s}]\n  - name: b\n    url: https://y\n",
			"keypool.yaml: line 5: did not find expected '-' indicator (is the line indented as it should be?)"},
		{"the last line, without a newline", "proxy_tokens: [t]\nupstreams:\n  - name: a\n    url: https://x\n   keys: [{secret: s}]",
			"keypool.yaml: line 5: "},
		{"a line yaml names itself", "proxy_tokens: [t]\nupstreams:\n  - name: a: b\n    url: https://x\n",
			"keypool.yaml: line 3: mapping values are not allowed in this context\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, _, stderr := runCommand(t, nil, "check", "-config", writeConfig(t, tt.conf, nil))
			assert.Equal(t, exitUsage, status)
			assert.Contains(t, stderr, tt.want)
			assert.Len(t, lines(stderr), 1, "one line: %q", stderr)
		})
	}
}

func TestCheckSaysAnEmptyFileIsEmpty(t *testing.T) {
	for _, conf := range []string{"", "\n\n", "# keypool's configuration\n"} {
		status, stdout, stderr := runCommand(t, nil, "check", "-config", writeConfig(t, conf, nil))
		assert.Equal(t, exitUsage, status)
		assert.Empty(t, stdout)
		assert.Equal(t, []string{"keypool check: config: keypool.yaml is empty: a configuration sets at least proxy_tokens and upstreams (docs/proxy.md)"}, lines(stderr), "%q", conf)
	}
}

func TestCheckSaysTheStateIsHeld(t *testing.T) {
	state := t.TempDir()
	held, err := keypool.OpenBadgerStore(state)
	require.NoError(t, err)
	path := writeConfig(t, "proxy_tokens: [t]\noperator_tokens: [operator-token-of-the-test]\nstate: "+state+"\nupstreams: [{url: 'https://x', keys: [{secret: s}]}]\n", nil)
	status, stdout, stderr := runCommand(t, nil, "check", "-config", path)
	assert.Equal(t, exitUsage, status)
	assert.NotContains(t, stdout, "no mistakes")
	assert.Contains(t, stderr, "keypool check: state: "+state+": state directory is held by another process (a running keypool serve or demo)")

	require.NoError(t, held.Close())
	status, stdout, stderr = runCommand(t, nil, "check", "-config", path)
	assert.Equal(t, 0, status, stderr)
	assert.Contains(t, stdout, "no mistakes", "free again")
	store, err := keypool.OpenBadgerStore(state)
	require.NoError(t, err, "check let the directory go")
	require.NoError(t, store.Close())
}
