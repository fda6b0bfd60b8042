package main

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/keypool-go/keypool"
)

// config is the proxy's configuration file.
type config struct {
	// Listen is the address the proxy serves on; default 127.0.0.1:8787.
	Listen string `yaml:"listen"`
	// ProxyTokens are what the proxy's own clients present, as a bearer
	// token or an API-key header, instead of an upstream key.
	ProxyTokens []secretRef `yaml:"proxy_tokens"`
	// OperatorTokens are what the proxy's operators present to read its
	// own endpoints — /status, /metrics, the status page — and to unbench
	// keys, which a proxy token then may not; without them a proxy token
	// may, and serve warns of it.
	OperatorTokens []secretRef `yaml:"operator_tokens"`
	// Clients are the proxy's clients, each with a token of its own and,
	// optionally, its own limits, budget, models, routes and expiry
	// (clientsconfig.go).
	Clients []clientRef `yaml:"clients"`
	// State is where the pools keep their state: a directory (Badger), or
	// a redis:// URL that replicas of the proxy share; default
	// keypool-state, in the directory serve runs in.
	State string `yaml:"state"`
	// Replicas, with a Redis state, is how many proxies share it: while
	// Redis is down each serves from local windows at 1/Replicas of every
	// limit. Zero refuses requests while Redis is down.
	Replicas int `yaml:"replicas"`
	// StateTimeout, with a Redis state, bounds each call to Redis: a
	// pause or an outage longer is noticed within it, and replicas says
	// what happens then; default 500ms.
	StateTimeout string `yaml:"state_timeout"`
	// LogLevel is the least level serve logs: debug, info (the default:
	// a line per request, bench and return), warn or error.
	LogLevel string `yaml:"log_level"`
	// Upstreams are the vendors, in fallback order.
	Upstreams []upstream `yaml:"upstreams"`

	// Hosts are the names, besides localhost and the listen address's,
	// by which browsers reach the proxy's status page and own endpoints;
	// a request for them under any other name — a DNS rebinding — is
	// refused. An IP address is always taken.
	Hosts []string `yaml:"hosts"`
	// SecureCookies marks the status page's session cookie Secure — sent
	// back over HTTPS only — for a proxy behind a front that ends TLS; a
	// request that comes over TLS gets a Secure cookie without it.
	SecureCookies bool `yaml:"secure_cookies"`

	// MaxRequestBody bounds a client's request body: a number of bytes, or
	// a size such as 32MiB; default 32MiB. A longer body is answered 413.
	MaxRequestBody string `yaml:"max_request_body"`
	// MaxHeaderBytes bounds a request's headers: a number of bytes, or a
	// size such as 64KiB; default 64KiB. Longer headers are answered 431.
	MaxHeaderBytes string `yaml:"max_header_bytes"`
	// MaxPendingConns bounds the connections whose first request's headers
	// are not all in — no token checked yet; when one more opens, the one
	// that has waited longest is closed; default 512.
	MaxPendingConns *int `yaml:"max_pending_conns"`
	// HeaderTimeout bounds how long a client may take to send a request's
	// headers, from the first byte of the connection or the end of the last
	// answer; default 10s.
	HeaderTimeout string `yaml:"header_timeout"`
	// BodyTimeout bounds how long a client may take to send a request's
	// body; default 1m.
	BodyTimeout string `yaml:"body_timeout"`
	// IdleTimeout is how long a client's connection may sit idle between
	// requests before the proxy closes it; default 2m.
	IdleTimeout string `yaml:"idle_timeout"`
	// WriteTimeout bounds how long one write of a forwarded answer may
	// stall — a client that stops reading — and the whole answer of
	// /status and /metrics; default 1m. Waiting for the upstream and a
	// stream's pauses do not count.
	WriteTimeout string `yaml:"write_timeout"`
	// ShutdownTimeout bounds a shutdown: requests in flight get two thirds
	// of it to finish, saving the state the rest; default 15s.
	ShutdownTimeout string `yaml:"shutdown_timeout"`
}

// upstream is one vendor the proxy forwards to.
type upstream struct {
	Name        string            `yaml:"name"`
	URL         string            `yaml:"url"`
	Auth        string            `yaml:"auth"`
	Keys        []keyRef          `yaml:"keys"`
	Limits      limits            `yaml:"limits"`
	ModelLimits map[string]limits `yaml:"model_limits"`
	// AccountLimits are the limits of each account the keys name: the
	// keys of one account share its windows.
	AccountLimits map[string]limits `yaml:"account_limits"`
	KeyCap        limits            `yaml:"key_cap"`
	CalendarDay   *calendarDay      `yaml:"calendar_day"`
	// Prices are what each model costs, in US dollars per million
	// tokens, by the model a request names: what budgets count.
	Prices map[string]price `yaml:"prices"`
	// AccountBudgets cap what the keys of each account spend together.
	AccountBudgets map[string]budget `yaml:"account_budgets"`
	Models         map[string]string `yaml:"models"`
	Wait           string            `yaml:"wait"`
	// Affinity keeps a conversation on the key that served it.
	Affinity *affinity `yaml:"affinity"`
	// IdleConns is how many idle connections to the upstream the proxy
	// keeps for reuse: at least the requests it expects at once; default
	// 256.
	IdleConns *int `yaml:"idle_conns"`
	// DialTimeout bounds connecting to the upstream; default 10s.
	DialTimeout string `yaml:"dial_timeout"`
	// TLSTimeout bounds the TLS handshake with the upstream; default 10s.
	TLSTimeout string `yaml:"tls_timeout"`
	// AnswerTimeout bounds the wait for the head of the upstream's answer
	// once the request is sent; default 10m, as long as a completion that
	// does not stream may take.
	AnswerTimeout string `yaml:"answer_timeout"`
}

// keyRef is one key entry: its secret inline, from an environment variable,
// or from a file of one secret a line.
type keyRef struct {
	ID     string `yaml:"id"`
	Secret string `yaml:"secret"`
	Env    string `yaml:"env"`
	File   string `yaml:"file"`
	Paid   bool   `yaml:"paid"`
	// Priority orders keys: lower first, free before paid within one.
	Priority int    `yaml:"priority"`
	Limits   limits `yaml:"limits"`
	Account  string `yaml:"account"`
	// Budget caps what the key spends, by the upstream's prices.
	Budget budget `yaml:"budget"`
}

// secretRef is a proxy token: a literal, or "env:NAME".
type secretRef string

type limits struct {
	RPM int64 `yaml:"rpm"`
	RPD int64 `yaml:"rpd"`
	TPM int64 `yaml:"tpm"`
	TPD int64 `yaml:"tpd"`
	// InFlight bounds the requests a key (or an account) holds at once.
	InFlight int64 `yaml:"in_flight"`
}

func (l limits) pool() keypool.Limits {
	return keypool.Limits{RPM: l.RPM, RPD: l.RPD, TPM: l.TPM, TPD: l.TPD, InFlight: l.InFlight}
}

// affinity is how a route keeps conversations on keys: how many it keeps,
// for how long after their last request, and the request header that names
// one, beside the request's own fields.
type affinity struct {
	Conversations *int   `yaml:"conversations"`
	Idle          string `yaml:"idle"`
	Header        string `yaml:"header"`
}

type calendarDay struct {
	Hour int    `yaml:"hour"`
	Zone string `yaml:"zone"`
}

// settings is a configuration checked and resolved: secrets read, styles
// parsed, durations parsed.
type settings struct {
	listen         string
	tokens         [][]byte // the proxy tokens, which forward
	operatorTokens [][]byte // the operator tokens, which read the own endpoints
	state          string
	stateDefault   bool // state is not set: the default
	replicas       int
	stateTimeout   time.Duration // 0: redisstore's default
	logLevel       slog.Level
	routes         []routeSettings
	clients        []clientSettings // those of clients:, in order
	warnings       []string
	inlineKey      bool // some secret is written in the file itself
	secureCookies  bool
	hosts          []string // the names of the own endpoints, in lower case, without a final dot
	// clock is the pools' and the fallback's clock, and the one answers
	// are dated by; nil: time.Now. Tests set it; the file cannot.
	clock func() time.Time

	maxBody         int64 // bytes of a request body
	maxHeaderBytes  int   // bytes of a request's headers
	maxPendingConns int
	headerTimeout   time.Duration
	bodyTimeout     time.Duration
	idleTimeout     time.Duration
	writeTimeout    time.Duration
	shutdownTimeout time.Duration
}

type routeSettings struct {
	name    string
	url     *url.URL
	keys    []keypool.Key // each with its ID: where it came from, unless the file names it
	options []keypool.Option
	models  map[string]string
	prices  map[string]keypool.Price // by the route's name of a model; what a client's budget counts

	idleConns     int
	dialTimeout   time.Duration
	tlsTimeout    time.Duration
	answerTimeout time.Duration
}

// The defaults of the configuration's limits, in one place.
const (
	// defaultState is the state directory when state is not set, relative
	// to the directory serve runs in.
	defaultState  = "keypool-state"
	defaultListen = "127.0.0.1:8787"

	// defaultMaxHeaderBytes bounds a request's headers: an SDK's are a
	// few KiB (nginx takes 32 KiB at most; the proxy drops cookies), and
	// Go's default, 1 MiB, let 2,000 connections that never ended their
	// headers hold 1 GiB. defaultMaxPendingConns bounds the connections
	// that hold them: together at most 32 MiB of headers read.
	defaultMaxHeaderBytes  = 64 << 10
	defaultMaxPendingConns = 512
	// The bounds of max_header_bytes, and of max_pending_conns.
	minHeaderBytes  = 4 << 10
	maxHeaderBytes  = 16 << 20
	maxPendingConns = 1 << 20

	// defaultMaxBody is the largest request body Anthropic's Messages API
	// takes (https://docs.anthropic.com/en/api/overview, "Request size
	// limits"); base64 images make bodies of megabytes.
	defaultMaxBody         = 32 << 20
	defaultHeaderTimeout   = 10 * time.Second
	defaultBodyTimeout     = time.Minute
	defaultIdleTimeout     = 2 * time.Minute
	defaultWriteTimeout    = time.Minute
	defaultShutdownTimeout = 15 * time.Second

	defaultIdleConns     = 256
	defaultDialTimeout   = 10 * time.Second
	defaultTLSTimeout    = 10 * time.Second
	defaultAnswerTimeout = 10 * time.Minute

	// maxIdleConns bounds idle_conns: each idle connection holds a file
	// descriptor and buffers.
	maxIdleConns = 1 << 16
	// maxKeysPerUpstream bounds the keys of one upstream, which a key
	// file of any length could give.
	maxKeysPerUpstream = 10000
)

// configError is one mistake in the configuration, naming its field as the
// file writes it: upstreams[1].keys[0].env.
type configError struct {
	field string
	err   error
}

// Error says the mistake on one line: a value quoted from the file — a zone,
// a variable's or a file's name — shows its line breaks as \n and \r.
func (e *configError) Error() string {
	return oneLine.Replace(e.field + ": " + e.err.Error())
}

var oneLine = strings.NewReplacer("\n", `\n`, "\r", `\r`)

func (e *configError) Unwrap() error { return e.err }

func fieldErr(field, format string, args ...any) error {
	return &configError{field: field, err: fmt.Errorf(format, args...)}
}

// mistakes are the mistakes found in a configuration, each a *configError,
// in the order they were found. Its Error is a line for each, at most
// maxMistakes of them.
type mistakes []error

// maxMistakes bounds the mistakes an error shows.
const maxMistakes = 50

func (m *mistakes) add(err error) { *m = append(*m, err) }

func (m *mistakes) addf(field, format string, args ...any) { m.add(fieldErr(field, format, args...)) }

func (m mistakes) Error() string {
	lines := make([]string, 0, min(len(m), maxMistakes+1))
	for i, err := range m {
		if i == maxMistakes {
			lines = append(lines, fmt.Sprintf("… and %d more mistakes", len(m)-i))
			break
		}
		lines = append(lines, err.Error())
	}
	return strings.Join(lines, "\n")
}

func (m mistakes) Unwrap() []error { return m }

// err returns m, or nil when it holds no mistake.
func (m mistakes) err() error {
	if len(m) == 0 {
		return nil
	}
	return m
}

// fieldOf returns the field a mistake names; "" when it names none.
func fieldOf(err error) string {
	var ce *configError
	if errors.As(err, &ce) {
		return ce.field
	}
	return ""
}

// merge adds to m the mistakes of more, except those of a field at or
// under a field m already names: a value the file gives in the wrong shape
// is not also reported missing.
func (m *mistakes) merge(more error) {
	var list mistakes
	if !errors.As(more, &list) {
		if more != nil {
			m.add(more)
		}
		return
	}
	earlier := slices.Clip(*m)
	for _, err := range list {
		if !earlier.covers(fieldOf(err)) {
			m.add(err)
		}
	}
}

func (m mistakes) covers(field string) bool {
	for _, err := range m {
		f := fieldOf(err)
		if f != "" && (field == f || strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[")) {
			return true
		}
	}
	return false
}

// loadConfig reads and checks the configuration file at path, reading
// secrets from env, and returns every mistake it finds as mistakes. The
// settings it returns are complete only when there is none; with some they
// still hold the state and the listen address, for the checks of those.
func loadConfig(path string, env func(string) (string, bool)) (*settings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, mistakes{fieldErr("config", "%v", err)}
	}
	c, err := parseConfig(data, filepath.Base(path))
	var all mistakes
	all.merge(err)
	if c == nil {
		return nil, all
	}
	s, err := c.resolve(env)
	all.merge(err)
	s.warnings = append(s.warnings, readableSecrets(path, s.inlineKey, c)...)
	return s, all.err()
}

// readableSecrets warns of each file that holds secrets and that other
// users may read: the configuration at path, when it holds a secret
// inline, and each key file c names.
func readableSecrets(path string, inline bool, c *config) []string {
	var files []string
	if inline {
		files = append(files, path)
	}
	for _, u := range c.Upstreams {
		for _, k := range u.Keys {
			if k.File != "" && !slices.Contains(files, k.File) {
				files = append(files, k.File)
			}
		}
	}
	var warnings []string
	for _, f := range files {
		if st, err := os.Stat(f); err == nil && st.Mode().Perm()&0o077 != 0 {
			warnings = append(warnings, fmt.Sprintf("%s holds secrets and is readable by others (mode %04o); chmod 600 it", f, st.Mode().Perm()))
		}
	}
	return warnings
}

// parseConfig decodes the text of a configuration file; name names the file
// in errors. It returns every mistake of shape it finds — unknown fields,
// values of the wrong type — with the configuration as far as it could be
// read; a file that is not YAML gives no configuration.
func parseConfig(data []byte, name string) (*config, error) {
	var c config
	m := decodeYAML(data, &c, name)
	if len(m) == 1 && fieldOf(m[0]) == "config" && c.isZero() {
		return nil, m
	}
	return &c, m.err()
}

func (c *config) isZero() bool {
	return c.Listen == "" && c.ProxyTokens == nil && c.OperatorTokens == nil && c.Clients == nil && c.State == "" && c.Upstreams == nil
}

// resolve checks c and reads its secrets, looking environment variables up
// with env. It returns the settings, and every mistake as mistakes: the
// settings are complete only when there is none.
func (c *config) resolve(env func(string) (string, bool)) (*settings, error) {
	var m mistakes
	s := &settings{listen: c.Listen, state: c.State, replicas: c.Replicas, secureCookies: c.SecureCookies}
	if s.listen == "" {
		s.listen = defaultListen
	}
	if _, _, err := net.SplitHostPort(s.listen); err != nil {
		m.addf("listen", "%q is not host:port", s.listen)
	}
	if s.state == "" {
		s.state, s.stateDefault = defaultState, true
	}
	s.hosts = ownHosts(s.listen, c.Hosts, &m)
	switch {
	case c.Replicas < 0:
		m.addf("replicas", "%d is negative", c.Replicas)
	case c.Replicas > 0 && !isRedisURL(s.state):
		m.addf("replicas", "needs a redis:// state to share")
	}
	if c.StateTimeout != "" {
		d, err := time.ParseDuration(c.StateTimeout)
		switch {
		case err != nil:
			m.addf("state_timeout", "%q is not a duration such as 500ms", c.StateTimeout)
		case d <= 0:
			m.addf("state_timeout", "%v is not positive", d)
		case !isRedisURL(s.state):
			m.addf("state_timeout", "bounds the calls to a redis:// state; a directory has none")
		default:
			s.stateTimeout = d
		}
	}
	if err := s.logLevel.UnmarshalText([]byte(c.LogLevel)); err != nil || c.LogLevel == "" {
		s.logLevel = slog.LevelInfo
		if c.LogLevel != "" {
			m.addf("log_level", "%q is not debug, info, warn or error", c.LogLevel)
		}
	}
	c.resolveLimits(s, &m)
	if len(c.ProxyTokens) == 0 && len(c.Clients) == 0 {
		m.addf("proxy_tokens", "at least one token is required (here or in clients): clients present it instead of an upstream key")
	}
	s.tokens = s.readTokens("proxy_tokens", c.ProxyTokens, env, &m)
	s.operatorTokens = s.readTokens("operator_tokens", c.OperatorTokens, env, &m)
	for i, op := range s.operatorTokens {
		if j := slices.IndexFunc(s.tokens, func(t []byte) bool { return string(t) == string(op) }); j >= 0 {
			m.addf(fmt.Sprintf("operator_tokens[%d]", i), "the same token as proxy_tokens[%d]: an operator's token is its own, apart from the clients'", j)
		}
	}
	switch {
	case len(c.OperatorTokens) == 0 && len(c.ProxyTokens) == 0:
		s.warnings = append(s.warnings, "operator_tokens is not set, nor proxy_tokens: no token may read /status, /metrics and the status page, nor unbench keys (a client's never does); give operators tokens of their own in operator_tokens")
	case len(c.OperatorTokens) == 0:
		s.warnings = append(s.warnings, "operator_tokens is not set: every proxy token may read /status, /metrics and the status page, and unbench keys; give operators tokens of their own in operator_tokens")
	}
	if len(c.Upstreams) == 0 {
		m.addf("upstreams", "missing: name at least one upstream")
	}
	fields := make([]string, len(c.Upstreams))
	for i, u := range c.Upstreams {
		fields[i] = fmt.Sprintf("upstreams[%d]", i)
		r, inline := u.resolve(fields[i], env, &m)
		s.inlineKey = s.inlineKey || inline
		s.routes = append(s.routes, r)
		if w := u.unboundedWarning(fields[i]); w != "" {
			s.warnings = append(s.warnings, w)
		}
	}
	judgeRoutes(s.routes, fields, &m)
	c.resolveClients(s, env, &m)
	return s, m.err()
}

// hostName matches a host name as a Host header carries it, without its
// port: labels of letters, digits and hyphens, with a final dot or not.
var hostName = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*\.?$`)

// ownHosts returns the names the own endpoints answer for — localhost,
// the listen address's host when it is a name, and hosts — in lower case
// and without a final dot, noting in m each of hosts that is not a host
// name.
func ownHosts(listen string, hosts []string, m *mistakes) []string {
	names := []string{"localhost"}
	if host, _, err := net.SplitHostPort(listen); err == nil && !isIP(host) && hostName.MatchString(host) {
		names = append(names, canonicalHost(host))
	}
	for i, h := range hosts {
		if isIP(h) {
			continue // always taken
		}
		if len(h) > 253 || !hostName.MatchString(h) {
			m.addf(fmt.Sprintf("hosts[%d]", i), "%q is not a host name such as keypool.example.com: give it without a scheme, port or path", h)
			continue
		}
		names = append(names, canonicalHost(h))
	}
	return names
}

// isIP reports whether a host is an IP address, with its brackets or not.
func isIP(host string) bool {
	_, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return err == nil
}

// canonicalHost returns a host name in lower case, without a final dot.
func canonicalHost(h string) string {
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// minTokenLength is the length under which a token is warned of as one
// that may be guessed.
const minTokenLength = 16

// readTokens reads the tokens of the list field, noting each mistake in m
// and warning in s of each shorter than minTokenLength; the values it
// returns are those read, in order, whose index is their place in the
// list when there is no mistake.
func (s *settings) readTokens(field string, refs []secretRef, env func(string) (string, bool), m *mistakes) [][]byte {
	var tokens [][]byte
	for i, t := range refs {
		if v, ok := s.readToken(fmt.Sprintf("%s[%d]", field, i), t, env, m); ok {
			tokens = append(tokens, v)
		}
	}
	return tokens
}

// readToken reads the token at field, noting its mistake in m and
// warning in s when it is shorter than minTokenLength; ok is false when
// it could not be read.
func (s *settings) readToken(field string, t secretRef, env func(string) (string, bool), m *mistakes) (_ []byte, ok bool) {
	v, inline, err := t.value(env)
	if err != nil {
		m.add(&configError{field, err})
		return nil, false
	}
	if n := utf8.RuneCountInString(v); n < minTokenLength {
		s.warnings = append(s.warnings, fmt.Sprintf("%s is %s long: a token shorter than %d may be guessed; use a long random one (openssl rand -hex 32)",
			field, count(n, "character"), minTokenLength))
	}
	s.inlineKey = s.inlineKey || inline
	return []byte(v), true
}

// operators returns the tokens that may read the proxy's own endpoints
// and unbench, and the field that lists them: the operator tokens, or,
// when there are none, the proxy tokens.
func (s *settings) operators() (tokens [][]byte, field string) {
	if len(s.operatorTokens) > 0 {
		return s.operatorTokens, "operator_tokens"
	}
	return s.tokens, "proxy_tokens"
}

// resolveLimits reads the server's size and time limits into s.
func (c *config) resolveLimits(s *settings, m *mistakes) {
	s.maxBody = defaultMaxBody
	if c.MaxRequestBody != "" {
		n, err := parseSize(c.MaxRequestBody)
		if err != nil {
			m.add(&configError{field: "max_request_body", err: err})
		}
		s.maxBody = n
	}
	s.maxHeaderBytes = defaultMaxHeaderBytes
	if c.MaxHeaderBytes != "" {
		n, err := parseSize(c.MaxHeaderBytes)
		if err == nil && (n < minHeaderBytes || n > maxHeaderBytes) {
			err = fmt.Errorf("%q is not a size from 4KiB to 16MiB", c.MaxHeaderBytes)
		}
		if err != nil {
			m.add(&configError{field: "max_header_bytes", err: err})
		}
		s.maxHeaderBytes = int(n)
	}
	s.maxPendingConns = defaultMaxPendingConns
	if c.MaxPendingConns != nil {
		if *c.MaxPendingConns < 1 || *c.MaxPendingConns > maxPendingConns {
			m.addf("max_pending_conns", "%d is not in 1..%d", *c.MaxPendingConns, maxPendingConns)
		}
		s.maxPendingConns = *c.MaxPendingConns
	}
	readDurations("", []durationField{
		{"header_timeout", c.HeaderTimeout, defaultHeaderTimeout, &s.headerTimeout},
		{"body_timeout", c.BodyTimeout, defaultBodyTimeout, &s.bodyTimeout},
		{"idle_timeout", c.IdleTimeout, defaultIdleTimeout, &s.idleTimeout},
		{"write_timeout", c.WriteTimeout, defaultWriteTimeout, &s.writeTimeout},
		{"shutdown_timeout", c.ShutdownTimeout, defaultShutdownTimeout, &s.shutdownTimeout},
	}, m)
}

// durationField is a duration of the configuration: its field, its text,
// its default when the text is empty, and where it goes.
type durationField struct {
	field, value string
	def          time.Duration
	to           *time.Duration
}

// readDurations reads each field, which must hold a positive duration;
// prefix goes before the field's name in mistakes.
func readDurations(prefix string, fields []durationField, m *mistakes) {
	for _, f := range fields {
		*f.to = f.def
		if f.value == "" {
			continue
		}
		d, err := time.ParseDuration(f.value)
		if err != nil || d <= 0 {
			m.addf(prefix+f.field, "%q is not a positive duration such as 10s", f.value)
			continue
		}
		*f.to = d
	}
}

// parseSize reads a size: a number of bytes, or a number with a unit — B,
// KB, MB, GB (powers of 1000) or KiB, MiB, GiB (powers of 1024). It is
// positive and at most 1 TiB.
func parseSize(v string) (int64, error) {
	num := strings.TrimRightFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.TrimSpace(v[len(num):])
	scale, ok := map[string]int64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9,
		"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n <= 0 || n > (1<<40)/scale {
		return 0, fmt.Errorf("%q is not a size such as 32MiB", v)
	}
	return n * scale, nil
}

func (t secretRef) value(env func(string) (string, bool)) (v string, inline bool, err error) {
	if name, ok := strings.CutPrefix(string(t), "env:"); ok {
		v, err := fromEnv(env, name)
		if err == nil {
			err = checkToken(v)
		}
		return v, false, err
	}
	if t == "" {
		return "", false, errors.New("empty token")
	}
	return string(t), true, checkToken(string(t))
}

// fromEnv returns the secret in the environment variable name, without
// the whitespace around it: a value written from a file often ends in a
// line break.
func fromEnv(env func(string) (string, bool), name string) (string, error) {
	v, ok := env(name)
	if !ok || v == "" {
		return "", fmt.Errorf("%s is not set", name)
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", fmt.Errorf("%s holds only whitespace", name)
	}
	return v, nil
}

// checkToken returns an error, which never quotes the token, if a proxy
// token holds a control character: a client could not send it in a header.
// (keypool.New judges the upstream keys.)
func checkToken(token string) error {
	for i, r := range token {
		if r < ' ' || r == 0x7f {
			return fmt.Errorf("the token has a control character at byte %d", i)
		}
	}
	return nil
}

// resolve reads an upstream, whose path in the file is field, into a
// route, noting its mistakes in m; the route is complete only when there
// is none.
func (u upstream) resolve(field string, env func(string) (string, bool), m *mistakes) (r routeSettings, inline bool) {
	r = routeSettings{name: u.Name, models: u.Models}
	for model, p := range u.Prices {
		if r.prices == nil {
			r.prices = map[string]keypool.Price{}
		}
		r.prices[model] = p.pool()
	}
	switch target, err := url.Parse(u.URL); {
	case u.URL == "":
		m.addf(field+".url", "missing")
	case err != nil:
		m.addf(field+".url", "%q is not a URL", u.URL)
	default:
		r.url = target
		if r.name == "" {
			r.name = target.Hostname()
		}
	}
	accounts := map[string]bool{}
	for _, k := range u.Keys {
		accounts[k.Account] = true
	}
	r.options = append(u.options(field, m), u.spendOptions(field, accounts, m)...)
	u.needsPrices(field, m)
	r.idleConns = defaultIdleConns
	if u.IdleConns != nil {
		if *u.IdleConns < 1 || *u.IdleConns > maxIdleConns {
			m.addf(field+".idle_conns", "%d is not in 1..%d", *u.IdleConns, maxIdleConns)
		}
		r.idleConns = *u.IdleConns
	}
	readDurations(field+".", []durationField{
		{"dial_timeout", u.DialTimeout, defaultDialTimeout, &r.dialTimeout},
		{"tls_timeout", u.TLSTimeout, defaultTLSTimeout, &r.tlsTimeout},
		{"answer_timeout", u.AnswerTimeout, defaultAnswerTimeout, &r.answerTimeout},
	}, m)
	var keys []sourcedKey
	for j, k := range u.Keys {
		entry := fmt.Sprintf("%s.keys[%d]", field, j)
		got, in, err := k.resolve(entry, env, maxKeysPerUpstream-len(keys))
		if err != nil {
			m.add(err)
			continue
		}
		inline = inline || in
		if judgeEntry(k, entry, m) {
			keys = append(keys, got...)
		}
	}
	if len(u.Keys) == 0 {
		m.addf(field+".keys", "no keys")
	}
	for account := range u.AccountLimits {
		if !accounts[account] {
			m.addf(mapPath(field+".account_limits", account), "no key of this upstream names the account %q", account)
		}
	}
	for _, k := range judgeKeys(keys, r.options, m) {
		r.keys = append(r.keys, k.Key)
	}
	return r, inline
}

// options returns the pool options an upstream sets, noting in m each
// mistake keypool.New finds in them.
func (u upstream) options(field string, m *mistakes) []keypool.Option {
	var opts []keypool.Option
	if auth, err := authOption(u.Auth); err != nil {
		m.add(&configError{field + ".auth", err})
	} else if judgeOption(field+".auth", auth, m) {
		opts = append(opts, auth)
	}
	for _, l := range []struct {
		field  string
		limits limits
		opt    func(keypool.Limits) keypool.Option
	}{
		{".limits", u.Limits, keypool.WithLimits},
		{".key_cap", u.KeyCap, keypool.WithKeyCap},
	} {
		if judgeLimits(field+l.field, l.limits, l.opt, m) {
			opts = append(opts, l.opt(l.limits.pool()))
		}
	}
	if len(u.ModelLimits) > 0 {
		all := map[string]keypool.Limits{}
		for model, l := range u.ModelLimits {
			if judgeLimits(mapPath(field+".model_limits", model), l, func(l keypool.Limits) keypool.Option {
				return keypool.WithModelLimits(map[string]keypool.Limits{model: l})
			}, m) {
				all[model] = l.pool()
			}
		}
		opts = append(opts, keypool.WithModelLimits(all))
	}
	for account, l := range u.AccountLimits {
		at := mapPath(field+".account_limits", account)
		if judgeOption(at, keypool.WithAccountLimits(account, keypool.Limits{}), m) &&
			judgeLimits(at, l, func(l keypool.Limits) keypool.Option { return keypool.WithAccountLimits(account, l) }, m) {
			opts = append(opts, keypool.WithAccountLimits(account, l.pool()))
		}
	}
	if c := u.CalendarDay; c != nil {
		loc, err := time.LoadLocation(c.Zone)
		if err != nil {
			m.addf(field+".calendar_day.zone", "%v", err)
		} else if o := keypool.WithCalendarDay(c.Hour, loc); judgeOption(field+".calendar_day.hour", o, m) {
			opts = append(opts, o)
		}
	}
	if u.Wait != "" {
		if d, err := time.ParseDuration(u.Wait); err != nil {
			m.addf(field+".wait", "%q is not a duration such as 30s", u.Wait)
		} else if o := keypool.WaitForKey(d); judgeOption(field+".wait", o, m) {
			opts = append(opts, o)
		}
	}
	if a := u.Affinity; a != nil {
		opts = append(opts, a.options(field+".affinity", m)...)
	}
	return opts
}

// options returns the pool options a route's affinity sets, noting in m
// each mistake.
func (a affinity) options(field string, m *mistakes) []keypool.Option {
	var opts []keypool.Option
	if a.Header != "" {
		if !httpguts.ValidHeaderFieldName(a.Header) {
			m.addf(field+".header", "%q is not a header name", a.Header)
		} else {
			name := http.CanonicalHeaderKey(a.Header)
			opts = append(opts, keypool.WithAffinity(func(r *http.Request) string { return r.Header.Get(name) }))
		}
	}
	if a.Conversations == nil && a.Idle == "" {
		return opts
	}
	n, idle := keypool.DefaultAffinityConversations, keypool.DefaultAffinityIdle
	if a.Conversations != nil {
		n = *a.Conversations
	}
	if a.Idle != "" {
		d, err := time.ParseDuration(a.Idle)
		if err != nil {
			m.addf(field+".idle", "%q is not a duration such as 1h", a.Idle)
			return opts
		}
		idle = d
	}
	o := keypool.WithAffinityMemory(n, idle)
	if err := judge([]keypool.Key{standIn}, o); err != nil {
		if a.Conversations != nil && *a.Conversations < 0 {
			m.addf(field+".conversations", "%d is negative", n)
		} else {
			m.addf(field+".idle", "%q is not positive", a.Idle)
		}
		return opts
	}
	return append(opts, o)
}

// authOption reads an auth style: bearer, header:NAME or query:PARAM.
func authOption(style string) (keypool.Option, error) {
	kind, name, _ := strings.Cut(style, ":")
	switch {
	case style == "" || style == "bearer":
		return keypool.BearerAuth(), nil
	case kind == "header":
		return keypool.HeaderAuth(name), nil
	case kind == "query":
		return keypool.QueryAuth(name), nil
	}
	return nil, fmt.Errorf("unknown style %q: want bearer, header:NAME or query:PARAM", style)
}

// sourcedKey is a key of a route, with where the file gives it.
type sourcedKey struct {
	keypool.Key
	entry  string // the key entry's path: upstreams[0].keys[1]
	source string // the field its secret comes from: upstreams[0].keys[1].file
	where  string // where in that source: "openrouter-keys line 2", "GROQ_KEY_1"; "" inline
	idSet  bool   // the entry names its ID
}

// name names where the key comes from, for a mistake.
func (k sourcedKey) name() string {
	if k.where != "" {
		return k.source + " (" + k.where + ")"
	}
	return k.source
}

// resolve reads the secrets of a key entry, whose path is entry: one, or
// one a line of a file, at most most of them. Each key's ID is the one the
// entry names, else where it came from: the variable's name, the file's
// name and line (openrouter-keys:2), the entry's path. The error names its
// field.
func (k keyRef) resolve(entry string, env func(string) (string, bool), most int) (keys []sourcedKey, inline bool, err error) {
	set := 0
	for _, v := range []string{k.Secret, k.Env, k.File} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return nil, false, fieldErr(entry, "give exactly one of secret, env and file")
	}
	key := sourcedKey{Key: keypool.Key{ID: k.ID, Paid: k.Paid, Priority: k.Priority, Limits: k.Limits.pool(), Account: k.Account, Budget: k.Budget.pool()},
		entry: entry, idSet: k.ID != ""}
	switch {
	case k.Secret != "":
		key.Secret, key.source = k.Secret, entry+".secret"
		if key.ID == "" {
			key.ID = entry
		}
		return []sourcedKey{key}, true, nil
	case k.Env != "":
		key.source = entry + ".env"
		v, err := fromEnv(env, k.Env)
		if err != nil {
			return nil, false, &configError{key.source, err}
		}
		key.Secret, key.where = v, k.Env
		if key.ID == "" {
			key.ID = k.Env
		}
		return []sourcedKey{key}, false, nil
	}
	key.source = entry + ".file"
	keys, err = k.readFile(key, most)
	if err != nil {
		return nil, false, &configError{key.source, err}
	}
	return keys, false, nil
}

// readFile reads a file of one secret a line, blank lines and lines that
// start with # aside, each line's secret without the whitespace around it,
// at most most of them; each key is like key.
func (k keyRef) readFile(key sourcedKey, most int) ([]sourcedKey, error) {
	f, err := os.Open(k.File)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	base := filepath.Base(k.File)
	var keys []sourcedKey
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if len(keys) == most {
			return nil, fmt.Errorf("more than %d keys in one upstream", maxKeysPerUpstream)
		}
		fk := key
		fk.Secret, fk.where = line, fmt.Sprintf("%s line %d", base, n)
		switch {
		case k.ID != "":
			fk.ID = fmt.Sprintf("%s-%d", k.ID, len(keys)+1)
		default:
			fk.ID = fmt.Sprintf("%s:%d", base, n)
		}
		keys = append(keys, fk)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %v", k.File, err)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("%s holds no keys", k.File)
	}
	return keys, nil
}

// isRedisURL reports whether a state names a Redis server rather than a
// directory.
func isRedisURL(state string) bool {
	return strings.HasPrefix(state, "redis://") || strings.HasPrefix(state, "rediss://") || strings.HasPrefix(state, "unix://")
}
