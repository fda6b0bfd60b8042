package main

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/keypool-go/keypool/internal/vendorsim"
)

// The files that package and deploy the command — the example
// configuration, the Dockerfile, compose.yaml, the systemd unit and the
// Grafana dashboard — are held here to what the command does.

// exampleEnv is a value for each variable keypool.example.yaml names.
var exampleEnv = map[string]string{
	"KEYPOOL_PROXY_TOKEN":    "kp-example-proxy-token-0123456789",
	"KEYPOOL_OPERATOR_TOKEN": "kp-example-operator-token-0123456789",
	"GROQ_KEY_1":             "gsk-example-one",
	"GROQ_KEY_2":             "gsk-example-two",
	"OPENAI_KEY_1":           "sk-example-one",
	"OPENAI_KEY_2":           "sk-example-two",
}

// TestExampleConfigChecks runs keypool check on keypool.example.yaml as it
// is, in a directory of its own (its state is relative), with the
// variables it names set: no mistake and no warning.
func TestExampleConfigChecks(t *testing.T) {
	path := filepath.Join(repoRoot(t), "keypool.example.yaml")
	t.Chdir(t.TempDir())
	status, stdout, stderr := runCommand(t, exampleEnv, "check", "-config", path)
	require.Equal(t, 0, status, "keypool check on keypool.example.yaml:\n%s%s", stdout, stderr)
	assert.Contains(t, stdout, "no mistakes: 2 upstreams, 4 keys")
	assert.Empty(t, stderr, "warnings")

	// The check can fail: without a variable the file names, it does.
	t.Setenv("OPENAI_KEY_2", "")
	status, _, stderr = runCommand(t, nil, "check", "-config", path)
	assert.Equal(t, exitUsage, status)
	assert.Contains(t, stderr, "OPENAI_KEY_2 is not set")
}

// TestExampleConfigNamesEveryField holds keypool.example.yaml to every
// field of the configuration: each YAML name of config, upstream, keyRef,
// limits, affinity, calendarDay, price and budget appears in it as a key,
// written out or commented out.
func TestExampleConfigNamesEveryField(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "keypool.example.yaml"))
	require.NoError(t, err)
	text := string(data)
	for _, name := range yamlFieldNames(config{}) {
		assert.True(t, strings.Contains(text, name+":"), "keypool.example.yaml does not name %s", name)
	}
}

// yamlFieldNames returns the YAML names of the fields of v's struct type
// and of every struct type its fields hold, through pointers, slices and
// maps, each once.
func yamlFieldNames(v any) []string {
	var names []string
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		for f := range t.Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
				names = append(names, name)
			}
			walk(f.Type)
		}
	}
	walk(reflect.TypeOf(v))
	return names
}

// instruction is one instruction of a Dockerfile: its keyword, in upper
// case, and the rest of it, continuation lines joined.
type instruction struct {
	keyword, args string
	stage         int // the build stage it is in, from 0
}

// dockerfile reads the repository's Dockerfile into its instructions.
func dockerfile(t *testing.T) []instruction {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "Dockerfile"))
	require.NoError(t, err)
	var all []instruction
	stage, held := -1, ""
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if held == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if more, ok := strings.CutSuffix(line, `\`); ok {
			held += more + " "
			continue
		}
		line, held = held+line, ""
		keyword, args, _ := strings.Cut(line, " ")
		keyword = strings.ToUpper(keyword)
		if keyword == "FROM" {
			stage++
		}
		all = append(all, instruction{keyword, strings.Join(strings.Fields(args), " "), stage})
	}
	return all
}

// releaseBuild is the go build that makes the released binary, with its
// output left out: the Dockerfile's build stage and .ci/run run it.
const releaseBuild = "CGO_ENABLED=0 go build -trimpath -o OUT ./cmd/keypool"

// goBuilds returns the go build commands of text — a RUN's, a script's
// lines — each with the path after -o as OUT.
func goBuilds(text string) []string {
	var builds []string
	for line := range strings.Lines(text) {
		if strings.HasPrefix(strings.TrimSpace(line), "#") || !strings.Contains(line, "go build") {
			continue
		}
		f := strings.Fields(line)
		for i := range f {
			if f[i] == "-o" && i+1 < len(f) {
				f[i+1] = "OUT"
			}
		}
		builds = append(builds, strings.Join(f, " "))
	}
	return builds
}

// TestDockerfile holds the Dockerfile to what the issue asks of the image
// and to the command: it builds in a stage of its own with the go build CI
// runs, its last stage is a minimal base (distroless static, or scratch),
// runs as a user who is not root, keeps /var/lib/keypool as a volume,
// exposes the port its health check asks, and its HEALTHCHECK and CMD are
// commands keypool has, whose flags parse. The health check is run, with
// its -url moved to a proxy the test starts, and answers 0.
func TestDockerfile(t *testing.T) {
	all := dockerfile(t)
	last := all[len(all)-1].stage
	require.GreaterOrEqual(t, last, 1, "a multi-stage build")
	of := func(keyword string) []instruction {
		var got []instruction
		for _, in := range all {
			if in.keyword == keyword && in.stage == last {
				got = append(got, in)
			}
		}
		return got
	}

	var builds []string
	for _, in := range all {
		if in.keyword == "RUN" && in.stage < last {
			builds = append(builds, goBuilds(in.args)...)
		}
	}
	assert.Equal(t, []string{releaseBuild}, builds, "the build stage's go build")
	ci, err := os.ReadFile(filepath.Join(repoRoot(t), ".ci", "run"))
	require.NoError(t, err)
	assert.Contains(t, goBuilds(string(ci)), releaseBuild, ".ci/run runs the Dockerfile's go build")

	from := of("FROM")[0].args
	assert.True(t, strings.HasPrefix(from, "gcr.io/distroless/static") || from == "scratch", "the image's base %q: distroless static or scratch", from)
	for _, in := range all {
		if in.keyword == "COPY" && in.stage == last {
			assert.Contains(t, in.args, "--from=", "the last stage copies only what a build stage made: %s", in.args)
		}
	}

	users := of("USER")
	require.NotEmpty(t, users, "a USER in the last stage")
	user, _, _ := strings.Cut(users[len(users)-1].args, ":")
	assert.NotContains(t, []string{"root", "0"}, user, "the image's user")

	require.Len(t, of("VOLUME"), 1)
	assert.Contains(t, of("VOLUME")[0].args, "/var/lib/keypool")
	require.Len(t, of("EXPOSE"), 1)
	port := of("EXPOSE")[0].args

	require.Len(t, of("ENTRYPOINT"), 1)
	entry := execForm(t, of("ENTRYPOINT")[0].args)
	require.Len(t, entry, 1)
	require.Len(t, of("CMD"), 1)
	serveArgs := execForm(t, of("CMD")[0].args)
	require.NotEmpty(t, serveArgs)
	assert.Equal(t, "serve", serveArgs[0])
	assert.Contains(t, serveArgs, "-config")

	require.Len(t, of("HEALTHCHECK"), 1)
	_, check, ok := strings.Cut(of("HEALTHCHECK")[0].args, " CMD ")
	require.True(t, ok, "HEALTHCHECK … CMD [...]")
	args := execForm(t, check)
	require.Equal(t, entry[0], args[0], "the health check runs the image's binary")
	args = args[1:]
	require.Contains(t, commandNames(), args[0], "the health check's command")
	i := slices.Index(args, "-url")
	require.Positive(t, i)
	assert.Equal(t, "http://127.0.0.1:"+port, args[i+1], "the health check asks the port the image exposes")

	base, _ := startProxy(t, oneUpstream(t, "http://127.0.0.1:1", "keys: [{secret: sk-docker}]"))
	args[i+1] = base
	status, stdout, stderr := runKeypool(t, args...)
	assert.Equal(t, 0, status, stderr)
	assert.Equal(t, "ok\n", stdout)
}

// execForm reads the JSON array of an instruction's exec form.
func execForm(t *testing.T, args string) []string {
	t.Helper()
	var v []string
	require.NoError(t, json.Unmarshal([]byte(args), &v), "the exec form of %s", args)
	return v
}

// commandNames are the names of keypool's commands.
func commandNames() []string {
	var names []string
	for _, c := range commands() {
		names = append(names, c.name)
	}
	return names
}

// TestReleaseBuildIsStatic runs the Dockerfile's go build and holds its
// binary to one a scratch or distroless image can run: no interpreter, no
// shared library.
func TestReleaseBuildIsStatic(t *testing.T) {
	long(t)
	out := filepath.Join(t.TempDir(), "keypool")
	f := strings.Fields(strings.Replace(releaseBuild, "OUT", out, 1))
	cmd := exec.Command(f[1], f[2:]...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), f[0])
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	bin, err := elf.Open(out)
	if err != nil {
		t.Skipf("not an ELF binary on %s: %v", runtime.GOOS, err)
	}
	defer bin.Close()
	for _, p := range bin.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "the binary names a dynamic loader")
	}
	libs, err := bin.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs)
}

// composeFile is what TestCompose reads of compose.yaml.
type composeFile struct {
	Services map[string]struct {
		Build       string   `yaml:"build"`
		Image       string   `yaml:"image"`
		Volumes     []string `yaml:"volumes"`
		Environment []string `yaml:"environment"`
		Ports       []string `yaml:"ports"`
		DependsOn   map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
}

// TestCompose holds compose.yaml to a Redis and two replicas of the
// Dockerfile's image that share it: each mounts the configuration where
// the image's CMD reads it, passes every variable it names, publishes the
// port it listens on, and waits for Redis; the configuration is one check
// finds no mistake in (its Redis aside), whose state is the redis
// service and whose replicas are the replicas compose runs.
func TestCompose(t *testing.T) {
	root := repoRoot(t)
	data, err := os.ReadFile(filepath.Join(root, "compose.yaml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(data, &c))
	require.Contains(t, c.Services, "redis")

	cmd := execForm(t, dockerInstruction(t, "CMD"))
	configAt := cmd[slices.Index(cmd, "-config")+1]
	port := dockerInstruction(t, "EXPOSE")

	var replicas []string
	var shared []int // each replica's configuration's replicas
	mounted := ""
	for name, s := range c.Services {
		if s.Build != "." {
			continue
		}
		replicas = append(replicas, name)
		assert.Equal(t, "service_healthy", s.DependsOn["redis"].Condition, "%s waits for Redis", name)
		var config string
		for _, v := range s.Volumes {
			if parts := strings.Split(v, ":"); len(parts) >= 2 && parts[1] == configAt {
				config = parts[0]
			}
		}
		require.NotEmpty(t, config, "%s mounts a configuration at %s", name, configAt)
		if mounted == "" {
			mounted = config
		}
		assert.Equal(t, mounted, config, "the replicas read one configuration")
		require.Len(t, s.Ports, 1)
		assert.True(t, strings.HasSuffix(s.Ports[0], ":"+port), "%s publishes the port %s: %s", name, port, s.Ports[0])

		env := map[string]string{}
		for _, v := range s.Environment {
			env[v] = "compose-test-value-of-" + v
		}
		settings, err := loadConfig(filepath.Join(root, mounted), func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		})
		require.NoError(t, err, "%s: the variables it passes are those the configuration names", name)
		assert.Equal(t, "redis://redis:6379/0", settings.state)
		assert.Equal(t, "0.0.0.0:"+port, settings.listen)
		shared = append(shared, settings.replicas)
	}
	assert.Len(t, replicas, 2)
	for _, n := range shared {
		assert.Equal(t, len(replicas), n, "replicas: the replicas compose runs")
	}
}

// dockerInstruction returns the arguments of the Dockerfile's last
// instruction keyword.
func dockerInstruction(t *testing.T, keyword string) string {
	t.Helper()
	all := dockerfile(t)
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].keyword == keyword {
			return all[i].args
		}
	}
	t.Fatalf("the Dockerfile has no %s", keyword)
	return ""
}

// systemdUnit reads deploy/keypool.service: each directive's values, in
// order, by section and name.
func systemdUnit(t *testing.T) (text string, directives map[string][]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "keypool.service"))
	require.NoError(t, err)
	directives = map[string][]string{}
	section := ""
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			name, value, ok := strings.Cut(line, "=")
			require.True(t, ok, "not a directive: %s", line)
			directives[section+"."+name] = append(directives[section+"."+name], value)
		}
	}
	return string(data), directives
}

// TestSystemdUnit holds deploy/keypool.service to the command and to what
// the issue asks of a unit: it starts keypool serve on a configuration,
// as a user who is not root, in its state directory; restarts it when it
// fails; gives a stop more than the shutdown timeout; reloads it with
// SIGHUP, which serve takes to re-read its configuration; and is hardened. Where
// systemd-analyze is on the PATH, it verifies the unit with ExecStart
// naming the built command.
func TestSystemdUnit(t *testing.T) {
	text, d := systemdUnit(t)
	one := func(name string) string {
		t.Helper()
		require.Len(t, d[name], 1, name)
		return d[name][0]
	}
	start := strings.Fields(one("Service.ExecStart"))
	require.GreaterOrEqual(t, len(start), 4)
	assert.Equal(t, []string{"serve", "-config"}, start[1:3])
	assert.Contains(t, commandNames(), start[1])

	assert.Equal(t, "/bin/kill -HUP $MAINPID", one("Service.ExecReload"), "keypool serve reloads on SIGHUP")
	assert.Equal(t, "on-failure", one("Service.Restart"))
	stop, err := time.ParseDuration(one("Service.TimeoutStopSec"))
	require.NoError(t, err)
	assert.Greater(t, stop, defaultShutdownTimeout, "a stop is given more than shutdown_timeout's default")

	if user := d["Service.User"]; len(user) > 0 {
		assert.NotContains(t, []string{"root", "0"}, user[0])
	} else {
		assert.Equal(t, "yes", one("Service.DynamicUser"), "a user of its own")
	}
	assert.Equal(t, "keypool", one("Service.StateDirectory"))
	assert.Equal(t, "%S/keypool", one("Service.WorkingDirectory"), "a relative state lands in the state directory")
	for name, want := range map[string]string{
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "RestrictSUIDSGID": "yes", "CapabilityBoundingSet": "",
	} {
		assert.Equal(t, want, one("Service."+name), name)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze is not on the PATH: the unit is not verified by systemd")
		return
	}
	dir := t.TempDir()
	unit := filepath.Join(dir, "keypool.service")
	require.NoError(t, os.WriteFile(unit, []byte(strings.ReplaceAll(text, start[0], keypoolBinary(t))), 0o644))
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	assert.NoError(t, err, "systemd-analyze verify: %s", out)
	assert.Empty(t, strings.TrimSpace(string(out)), "systemd-analyze verify")
}

// dashboardQueries returns every PromQL query of deploy/grafana-dashboard.json:
// each panel's targets' expr and each query variable's query.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana-dashboard.json"))
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(data, &d))
	var queries []string
	for _, p := range d.Panels {
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, target := range p.Targets {
			require.NotEmpty(t, target.Expr, "panel %q", p.Title)
			queries = append(queries, target.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		require.NoError(t, json.Unmarshal(v.Query, &q))
		queries = append(queries, q.Query)
	}
	return queries
}

// The parts of a PromQL query that name no metric: strings, label
// matchers, ranges, and the labels of a grouping.
var (
	promStrings   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRanges    = regexp.MustCompile(`\[[^\]]*\]`)
	promGroupings = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promName      = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// promKeywords are PromQL's words that are neither metrics nor functions.
var promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "offset": true, "bool": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "inf": true, "nan": true}

// promMetrics returns the metric names a PromQL query (or a Grafana
// label_values query) selects: each name that is not a function's (one
// followed by a parenthesis), a keyword or a label.
func promMetrics(query string) []string {
	q := promStrings.ReplaceAllString(query, `""`)
	q = promMatchers.ReplaceAllString(q, " ")
	q = promRanges.ReplaceAllString(q, " ")
	q = promGroupings.ReplaceAllString(q, " ")
	if inner, ok := strings.CutPrefix(strings.TrimSpace(q), "label_values("); ok {
		inner, _, _ = strings.Cut(inner, ",") // label_values(metric, label)
		q = inner
	}
	var names []string
	for _, at := range promName.FindAllStringIndex(q, -1) {
		name, rest := q[at[0]:at[1]], strings.TrimSpace(q[at[1]:])
		if at[0] > 0 && (q[at[0]-1] == '$' || q[at[0]-1] >= '0' && q[at[0]-1] <= '9' || q[at[0]-1] == '.') {
			continue // a variable, or a number's exponent or unit
		}
		if strings.HasPrefix(rest, "(") || promKeywords[strings.ToLower(name)] {
			continue
		}
		names = append(names, name)
	}
	return names
}

// scrapedNames returns the names of the series in a Prometheus text
// exposition: a histogram's as its _bucket, _sum and _count series.
func scrapedNames(exposition string) map[string]bool {
	names := map[string]bool{}
	for line := range strings.Lines(exposition) {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end > 0 {
			names[line[:end]] = true
		}
	}
	return names
}

// missingMetrics returns, for each query that names a metric not in
// served, the query and the metric.
func missingMetrics(queries []string, served map[string]bool) []string {
	var missing []string
	for _, q := range queries {
		for _, name := range promMetrics(q) {
			if !served[name] {
				missing = append(missing, name+" in "+q)
			}
		}
	}
	return missing
}

// TestPromMetrics holds the reading of a query's metric names to a table.
func TestPromMetrics(t *testing.T) {
	tests := []struct {
		query string
		want  []string
	}{
		{`min(keypool_store_healthy)`, []string{"keypool_store_healthy"}},
		{`sum by (keypool_outcome) (rate(keypool_requests_total{keypool_provider=~"$provider",keypool_outcome="rate"}[$__rate_interval]))`, []string{"keypool_requests_total"}},
		{`histogram_quantile(0.95, sum by (le) (rate(keypool_wait_duration_seconds_bucket[5m])))`, []string{"keypool_wait_duration_seconds_bucket"}},
		{`60 * sum(rate(keypool_tokens_total[1m])) / on(keypool_key_id) group_left keypool_limit_learned{keypool_limit_axis="tpm"}`, []string{"keypool_tokens_total", "keypool_limit_learned"}},
		{`label_values(keypool_requests_total, keypool_provider)`, []string{"keypool_requests_total"}},
		{`up == 1 and keypool_keys_available > 1e3`, []string{"up", "keypool_keys_available"}},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			assert.Equal(t, tt.want, promMetrics(tt.query))
		})
	}
}

// TestGrafanaDashboardMetricsExist starts keypool serve, the built
// command, in front of the fake vendor, sends it requests that make every
// kind of metric — answers, a revoked key's bench, tokens, spend by
// prices, a vendor's stated limits and use, a wait for a key — scrapes
// /metrics, and finds each metric every query of
// deploy/grafana-dashboard.json names among the series served. A query
// naming a metric the proxy does not serve fails it.
func TestGrafanaDashboardMetricsExist(t *testing.T) {
	queries := dashboardQueries(t)
	require.NotEmpty(t, queries)

	sim := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: "sk-dash-a", ID: "a", Limits: vendorsim.Limits{RPM: 1000, TPM: 1000000}, Latency: 200 * time.Millisecond},
		{Secret: "sk-dash-gone", ID: "gone", Revoked: true},
	}})
	t.Cleanup(sim.Close)
	const operator = "kp-operator-token-of-the-dashboard"
	p := startServe(t, fmt.Sprintf(`proxy_tokens: [%q]
operator_tokens: [%q]
state: %s
upstreams:
  - name: openai
    url: %s
    wait: 5s
    limits: {in_flight: 1}
    prices: {gpt-4o-mini: {input: 0.15, output: 0.60, max_output: 1000}}
    keys:
      - {id: a, secret: sk-dash-a, budget: {per_day: 100}}
      - {id: gone, secret: sk-dash-gone}
`, proxyToken, operator, t.TempDir(), sim.URL()))
	base := "http://" + p.addr
	// One key, at most one request on it at once, and 200 ms an answer: of
	// requests sent together, all but one wait for it.
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			resp, err := chat(t, base, false)
			if assert.NoError(t, err) {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
		})
	}
	wg.Wait()

	status, body := get(t, base+"/metrics", nil, http.Header{"Authorization": {"Bearer " + operator}})
	require.Equal(t, http.StatusOK, status, body)
	served := scrapedNames(body)
	assert.Empty(t, missingMetrics(queries, served), "metrics the dashboard names that /metrics does not serve")
	// The check can fail: a name one suffix off is missing.
	assert.Equal(t, []string{"keypool_wait_duration_bucket in rate(keypool_wait_duration_bucket[5m])"},
		missingMetrics([]string{"rate(keypool_wait_duration_bucket[5m])"}, served))
}
