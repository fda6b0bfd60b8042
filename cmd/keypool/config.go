package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/keypool-go/keypool"
)

// config is the proxy's configuration file.
type config struct {
	// Listen is the address the proxy serves on; default 127.0.0.1:8787.
	Listen string `yaml:"listen"`
	// ProxyTokens are what the proxy's own clients present, as a bearer
	// token or an API-key header, instead of an upstream key.
	ProxyTokens []secretRef `yaml:"proxy_tokens"`
	// State is where the pools keep their state: a directory (Badger), or
	// a redis:// URL that replicas of the proxy share; default
	// ./keypool-state.
	State string `yaml:"state"`
	// Replicas, with a Redis state, is how many proxies share it: while
	// Redis is down each serves from local windows at 1/Replicas of every
	// limit. Zero refuses requests while Redis is down.
	Replicas int `yaml:"replicas"`
	// Upstreams are the vendors, in fallback order.
	Upstreams []upstream `yaml:"upstreams"`

	// MaxRequestBody bounds a client's request body: a number of bytes, or
	// a size such as 32MiB; default 32MiB. A longer body is answered 413.
	MaxRequestBody string `yaml:"max_request_body"`
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
	KeyCap      limits            `yaml:"key_cap"`
	CalendarDay *calendarDay      `yaml:"calendar_day"`
	Models      map[string]string `yaml:"models"`
	Wait        string            `yaml:"wait"`
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
	Limits limits `yaml:"limits"`
}

// secretRef is a proxy token: a literal, or "env:NAME".
type secretRef string

type limits struct {
	RPM int64 `yaml:"rpm"`
	RPD int64 `yaml:"rpd"`
	TPM int64 `yaml:"tpm"`
	TPD int64 `yaml:"tpd"`
}

func (l limits) pool() keypool.Limits {
	return keypool.Limits{RPM: l.RPM, RPD: l.RPD, TPM: l.TPM, TPD: l.TPD}
}

type calendarDay struct {
	Hour int    `yaml:"hour"`
	Zone string `yaml:"zone"`
}

// settings is a configuration checked and resolved: secrets read, styles
// parsed, durations parsed.
type settings struct {
	listen    string
	tokens    [][]byte
	state     string
	replicas  int
	routes    []routeSettings
	warnings  []string
	inlineKey bool // some secret is written in the file itself

	maxBody         int64 // bytes of a request body
	headerTimeout   time.Duration
	bodyTimeout     time.Duration
	idleTimeout     time.Duration
	writeTimeout    time.Duration
	shutdownTimeout time.Duration
}

type routeSettings struct {
	name    string
	url     *url.URL
	keys    []keypool.Key
	options []keypool.Option
	models  map[string]string

	idleConns     int
	dialTimeout   time.Duration
	tlsTimeout    time.Duration
	answerTimeout time.Duration
}

// The defaults of the configuration's limits, in one place.
const (
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
)

// configError is one mistake in the configuration, naming its field.
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

// loadConfig reads and checks the configuration file at path.
func loadConfig(path string) (*settings, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fieldErr("config", "%v", err)
	}
	c, err := parseConfig(data, path)
	if err != nil {
		return nil, err
	}
	s, err := c.resolve(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	if s.inlineKey {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
			s.warnings = append(s.warnings, fmt.Sprintf("%s holds secrets and is readable by others (mode %04o); chmod 600 it", path, st.Mode().Perm()))
		}
	}
	return s, nil
}

// parseConfig decodes the text of a configuration file; name names the file
// in errors.
func parseConfig(data []byte, name string) (*config, error) {
	var c config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		// yaml lists its complaints a line each; the command says one line.
		msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), ":\n", ":")), " ")
		return nil, fieldErr("config", "%s: %s", name, msg)
	}
	return &c, nil
}

// resolve checks c and reads its secrets, looking environment variables up
// with env.
func (c *config) resolve(env func(string) (string, bool)) (*settings, error) {
	s := &settings{listen: c.Listen, state: c.State}
	if s.listen == "" {
		s.listen = "127.0.0.1:8787"
	}
	if _, _, err := net.SplitHostPort(s.listen); err != nil {
		return nil, fieldErr("listen", "%q is not host:port", s.listen)
	}
	if s.state == "" {
		s.state = "keypool-state"
	}
	s.replicas = c.Replicas
	if c.Replicas < 0 {
		return nil, fieldErr("replicas", "%d is negative", c.Replicas)
	}
	if c.Replicas > 0 && !isRedisURL(s.state) {
		return nil, fieldErr("replicas", "needs a redis:// state to share")
	}
	if err := c.resolveLimits(s); err != nil {
		return nil, err
	}
	if len(c.ProxyTokens) == 0 {
		return nil, fieldErr("proxy_tokens", "at least one token is required: clients present it instead of an upstream key")
	}
	for i, t := range c.ProxyTokens {
		v, inline, err := t.value(env)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("proxy_tokens[%d]", i), "%v", err)
		}
		s.inlineKey = s.inlineKey || inline
		s.tokens = append(s.tokens, []byte(v))
	}
	if len(c.Upstreams) == 0 {
		return nil, fieldErr("upstreams", "missing: name at least one upstream")
	}
	names := map[string]bool{}
	for i, u := range c.Upstreams {
		field := fmt.Sprintf("upstreams[%d]", i)
		r, inline, err := u.resolve(field, env)
		if err != nil {
			return nil, err
		}
		if names[r.name] {
			return nil, fieldErr(field+".name", "%q names two upstreams", r.name)
		}
		names[r.name] = true
		s.inlineKey = s.inlineKey || inline
		s.routes = append(s.routes, r)
	}
	return s, nil
}

// resolveLimits reads the server's size and time limits into s.
func (c *config) resolveLimits(s *settings) error {
	s.maxBody = defaultMaxBody
	if c.MaxRequestBody != "" {
		n, err := parseSize(c.MaxRequestBody)
		if err != nil {
			return &configError{field: "max_request_body", err: err}
		}
		s.maxBody = n
	}
	return readDurations("", []durationField{
		{"header_timeout", c.HeaderTimeout, defaultHeaderTimeout, &s.headerTimeout},
		{"body_timeout", c.BodyTimeout, defaultBodyTimeout, &s.bodyTimeout},
		{"idle_timeout", c.IdleTimeout, defaultIdleTimeout, &s.idleTimeout},
		{"write_timeout", c.WriteTimeout, defaultWriteTimeout, &s.writeTimeout},
		{"shutdown_timeout", c.ShutdownTimeout, defaultShutdownTimeout, &s.shutdownTimeout},
	})
}

// durationField is a duration of the configuration: its field, its text,
// its default when the text is empty, and where it goes.
type durationField struct {
	field, value string
	def          time.Duration
	to           *time.Duration
}

// readDurations reads each field, which must hold a positive duration;
// prefix goes before the field's name in errors.
func readDurations(prefix string, fields []durationField) error {
	for _, f := range fields {
		*f.to = f.def
		if f.value == "" {
			continue
		}
		d, err := time.ParseDuration(f.value)
		if err != nil || d <= 0 {
			return fieldErr(prefix+f.field, "%q is not a positive duration such as 10s", f.value)
		}
		*f.to = d
	}
	return nil
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
		return v, false, err
	}
	if t == "" {
		return "", false, errors.New("empty token")
	}
	return string(t), true, checkSecret(string(t))
}

// fromEnv returns the secret in the environment variable name, without
// the whitespace around it: a value written from a file often ends in a
// line break.
func fromEnv(env func(string) (string, bool), name string) (string, error) {
	v, ok := env(name)
	if !ok || v == "" {
		return "", fmt.Errorf("environment variable %s is not set", name)
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", fmt.Errorf("environment variable %s holds only whitespace", name)
	}
	return v, checkSecret(v)
}

// checkSecret returns an error, which never quotes the secret, if it holds
// a control character: no vendor issues such a key, and one in a header
// would end it.
func checkSecret(secret string) error {
	if strings.ContainsFunc(secret, unicode.IsControl) {
		return errors.New("the secret holds a control character")
	}
	return nil
}

func (u upstream) resolve(field string, env func(string) (string, bool)) (routeSettings, bool, error) {
	r := routeSettings{name: u.Name, models: u.Models}
	if u.URL == "" {
		return r, false, fieldErr(field+".url", "missing")
	}
	target, err := url.Parse(u.URL)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return r, false, fieldErr(field+".url", "%q is not an http or https URL", u.URL)
	}
	r.url = target
	if r.name == "" {
		r.name = target.Hostname()
	}
	auth, err := authOption(u.Auth)
	if err != nil {
		return r, false, &configError{field + ".auth", err}
	}
	r.options = append(r.options, auth,
		keypool.WithLimits(u.Limits.pool()), keypool.WithKeyCap(u.KeyCap.pool()))
	if len(u.ModelLimits) > 0 {
		m := map[string]keypool.Limits{}
		for model, l := range u.ModelLimits {
			m[model] = l.pool()
		}
		r.options = append(r.options, keypool.WithModelLimits(m))
	}
	if c := u.CalendarDay; c != nil {
		loc, err := time.LoadLocation(c.Zone)
		if err != nil {
			return r, false, fieldErr(field+".calendar_day.zone", "%v", err)
		}
		if c.Hour < 0 || c.Hour > 23 {
			return r, false, fieldErr(field+".calendar_day.hour", "%d is not in 0..23", c.Hour)
		}
		r.options = append(r.options, keypool.WithCalendarDay(c.Hour, loc))
	}
	if u.Wait != "" {
		d, err := time.ParseDuration(u.Wait)
		if err != nil || d < 0 {
			return r, false, fieldErr(field+".wait", "%q is not a duration such as 30s", u.Wait)
		}
		r.options = append(r.options, keypool.WaitForKey(d))
	}
	r.idleConns = defaultIdleConns
	if u.IdleConns != nil {
		if *u.IdleConns < 1 || *u.IdleConns > maxIdleConns {
			return r, false, fieldErr(field+".idle_conns", "%d is not in 1..%d", *u.IdleConns, maxIdleConns)
		}
		r.idleConns = *u.IdleConns
	}
	if err := readDurations(field+".", []durationField{
		{"dial_timeout", u.DialTimeout, defaultDialTimeout, &r.dialTimeout},
		{"tls_timeout", u.TLSTimeout, defaultTLSTimeout, &r.tlsTimeout},
		{"answer_timeout", u.AnswerTimeout, defaultAnswerTimeout, &r.answerTimeout},
	}); err != nil {
		return r, false, err
	}
	inline := false
	for j, k := range u.Keys {
		keys, in, err := k.resolve(env)
		if err != nil {
			return r, false, &configError{fmt.Sprintf("%s.keys[%d]%s", field, j, k.source()), err}
		}
		inline = inline || in
		r.keys = append(r.keys, keys...)
	}
	if len(r.keys) == 0 {
		return r, false, fieldErr(field+".keys", "no keys")
	}
	return r, inline, nil
}

// authOption reads an auth style: bearer, header:NAME or query:PARAM.
func authOption(style string) (keypool.Option, error) {
	kind, name, _ := strings.Cut(style, ":")
	switch {
	case style == "" || style == "bearer":
		return keypool.BearerAuth(), nil
	case kind == "header" && name != "":
		return keypool.HeaderAuth(name), nil
	case kind == "query" && name != "":
		return keypool.QueryAuth(name), nil
	}
	return nil, fmt.Errorf("unknown style %q: want bearer, header:NAME or query:PARAM", style)
}

// source names the field a key entry takes its secret from, for errors.
func (k keyRef) source() string {
	switch {
	case k.Env != "":
		return ".env"
	case k.File != "":
		return ".file"
	}
	return ".secret"
}

// resolve reads the secrets of a key entry: one, or one a line of a file.
func (k keyRef) resolve(env func(string) (string, bool)) (keys []keypool.Key, inline bool, err error) {
	set := 0
	for _, v := range []string{k.Secret, k.Env, k.File} {
		if v != "" {
			set++
		}
	}
	if set != 1 {
		return nil, false, errors.New("give exactly one of secret, env and file")
	}
	key := keypool.Key{ID: k.ID, Paid: k.Paid, Limits: k.Limits.pool()}
	switch {
	case k.Secret != "":
		key.Secret = k.Secret
		return []keypool.Key{key}, true, checkSecret(k.Secret)
	case k.Env != "":
		v, err := fromEnv(env, k.Env)
		if err != nil {
			return nil, false, err
		}
		key.Secret = v
		return []keypool.Key{key}, false, nil
	}
	f, err := os.Open(k.File)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if checkSecret(line) != nil {
			return nil, false, fmt.Errorf("line %d of %s holds a control character", n, k.File)
		}
		fk := key
		fk.Secret = line
		if k.ID != "" {
			fk.ID = fmt.Sprintf("%s-%d", k.ID, len(keys)+1)
		}
		keys = append(keys, fk)
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("reading %s: %v", k.File, err)
	}
	if len(keys) == 0 {
		return nil, false, fmt.Errorf("%s holds no keys", k.File)
	}
	return keys, false, nil
}

// isRedisURL reports whether a state names a Redis server rather than a
// directory.
func isRedisURL(state string) bool {
	return strings.HasPrefix(state, "redis://") || strings.HasPrefix(state, "rediss://") || strings.HasPrefix(state, "unix://")
}
