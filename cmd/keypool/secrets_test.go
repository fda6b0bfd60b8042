package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/internal/vendorsim"
)

// The secrets of the scenario: each distinctive, so that any trace of one
// in an output is found.
const (
	secretLive      = "sk-SECRET-live-71c2a9e4d0"
	secretRevoked   = "sk-SECRET-revoked-4f8e1b3a"
	secretThrottled = "sk-SECRET-throttled-9d03c6f2"
	secretQuery     = "qk-SECRET-query-2be57a10"
	secretFromEnv   = "sk-SECRET-env-5a1d9c77"
	secretProxy     = "kp-SECRET-proxy-e03b8d41"
	secretEchoQuery = "ek-SECRET-echo-query-7d2c0f19"
	secretEchoHead  = "ek-SECRET-echo-header-3a9b6e54"
)

var allSecrets = []string{secretLive, secretRevoked, secretThrottled, secretQuery, secretFromEnv, secretProxy, secretEchoQuery, secretEchoHead}

// outputs collects what the scenario shows the world, by where it shows
// it, for a scan for the secrets.
type outputs map[string][]byte

func (o outputs) add(where string, data []byte) { o[where] = append(o[where], data...) }

func (o outputs) addf(where, format string, args ...any) {
	o.add(where, fmt.Appendf(nil, format, args...))
}

// scan fails t for every output that holds a secret: whole, its last twelve
// characters, or its last four after a mask, as a vendor's masked echo
// shows them.
func (o outputs) scan(t *testing.T) {
	t.Helper()
	size := 0
	for _, data := range o {
		size += len(data)
	}
	t.Logf("scanning %d outputs, %d bytes, for %d secrets", len(o), size, len(allSecrets))
	for where, data := range o {
		for _, s := range allSecrets {
			last4 := s[len(s)-4:]
			for _, part := range []string{s, s[len(s)-12:], "*" + last4, "." + last4, "…" + last4} {
				if bytes.Contains(data, []byte(part)) {
					t.Errorf("%s shows the secret %q: %s", where, s, excerpt(data, part))
				}
			}
		}
	}
}

// excerpt returns the text around the first part in data.
func excerpt(data []byte, part string) string {
	i := bytes.Index(data, []byte(part))
	return string(data[max(i-80, 0):min(i+len(part)+80, len(data))])
}

// TestSecretsNeverLeave runs one scenario with telemetry, logs, the proxy,
// direct clients and a Badger directory, then scans every output for the
// secrets.
func TestSecretsNeverLeave(t *testing.T) {
	out := outputs{}

	openai := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAI, Keys: []vendorsim.Key{
		{Secret: secretLive, ID: "live", Limits: vendorsim.Limits{RPM: 6}},
		{Secret: secretRevoked, ID: "revoked", Revoked: true},
		{Secret: secretThrottled, ID: "throttled", Script: []vendorsim.Answer{
			{Status: 429, Header: http.Header{"Retry-After": {"30"}}, Body: `{"error":{"type":"rate_limit_exceeded"}}`}}},
		{Secret: secretFromEnv, ID: "env", WeeklySpent: 1e12},
	}})
	defer openai.Close()
	compatible := vendorsim.Start(vendorsim.Config{Dialect: vendorsim.OpenAICompatible, Keys: []vendorsim.Key{
		{Secret: secretQuery, ID: "query", Limits: vendorsim.Limits{RPM: 2}},
	}})
	defer compatible.Close()

	state := t.TempDir()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	conf := fmt.Sprintf(`
proxy_tokens: [%q]
state: %s
upstreams:
  - name: openai
    url: %s
    keys:
      - {secret: %s}
      - {secret: %s}
      - {secret: %s}
      - {env: OPENAI_EXTRA}
    limits: {rpm: 6}
    models: {gpt-4o-mini: gpt-4o-mini-2024-07-18}
  - name: compatible
    url: %s
    auth: query:key
    keys:
      - {id: query, secret: %s}
`, secretProxy, state, openai.URL(), secretLive, secretRevoked, secretThrottled, compatible.URL(), secretQuery)
	c, err := parseConfig([]byte(conf), "keypool.yaml")
	require.NoError(t, err)
	s, err := c.resolve(func(name string) (string, bool) { return secretFromEnv, name == "OPENAI_EXTRA" })
	require.NoError(t, err)
	srv, err := newServer(s, log)
	require.NoError(t, err)
	hs := httptest.NewServer(srv.handler())
	defer hs.Close()

	send := func(name, method, path, token, body string) {
		t.Helper()
		req, err := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out.addf("proxy answer to "+name, "%d %v %s", resp.StatusCode, resp.Header, b)
	}
	chat := `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello"}]}`
	stream := `{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`
	for i := range 12 { // through every key, then the second upstream, then none
		body := chat
		if i%3 == 0 {
			body = stream
		}
		send(fmt.Sprintf("chat %d", i), http.MethodPost, "/v1/chat/completions", secretProxy, body)
	}
	send("an upstream key for a token", http.MethodPost, "/v1/chat/completions", secretLive, chat)
	send("no token", http.MethodPost, "/v1/chat/completions", "", chat)
	send("a token in the query", http.MethodPost, "/v1/chat/completions?key="+secretProxy, "", chat)
	send("status", http.MethodGet, "/status", secretProxy, "")
	send("metrics", http.MethodGet, "/metrics", secretProxy, "")
	st, _ := openai.StatsOf("revoked")
	require.Positive(t, st.Unauthorized, "the revoked key was tried")
	require.True(t, bytes.HasPrefix(out["proxy answer to chat 11"], []byte("429 ")), "every key was used up")

	// The proxy forwarding to a vendor that is gone, with the key in the URL.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	goneConf := fmt.Sprintf("proxy_tokens: [%q]\nstate: %s\nupstreams: [{url: %q, auth: 'query:key', keys: [{secret: %s}]}]\n",
		secretProxy, t.TempDir(), gone.URL, secretQuery)
	c, err = parseConfig([]byte(goneConf), "gone.yaml")
	require.NoError(t, err)
	s, err = c.resolve(os.LookupEnv)
	require.NoError(t, err)
	goneSrv, err := newServer(s, log)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chat))
	req.Header.Set("Authorization", "Bearer "+secretProxy)
	goneSrv.handler().ServeHTTP(rec, req)
	assert.Equal(t, http.StatusBadGateway, rec.Code)
	out.addf("proxy answer with the vendor gone", "%d %v %s", rec.Code, rec.Header(), rec.Body.Bytes())
	goneSrv.close()

	echoingVendor(t, out, log)
	directClients(t, out, openai.URL(), gone.URL)
	configErrors(t, out)
	printed(t, out)

	hs.Close()
	srv.close()
	out.add("logs", []byte(logs.String()))
	require.Contains(t, logs.String(), "benched", "the logs tell of benches")
	files := 0
	require.NoError(t, filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		files++
		out.add("state file "+filepath.Base(path), data)
		return err
	}))
	require.Positive(t, files, "files in the state directory")
	out.scan(t)
}

// echoingVendor sends requests through the proxy to a vendor that gives
// back the key it got in every way it can — redirects, headers naming
// URLs, cookies, early hints, trailers, error bodies quoting the URL or
// masking the key — with the key in the query and in a header, and adds
// what the proxy's clients saw to out.
func echoingVendor(t *testing.T, out outputs, log *slog.Logger) {
	rec := &recorder{}
	vendor := httptest.NewServer(echoVendor(rec))
	defer vendor.Close()
	for auth, secret := range map[string]string{"query:key": secretEchoQuery, "header:x-api-key": secretEchoHead} {
		conf := fmt.Sprintf("proxy_tokens: [%q]\nstate: %s\nupstreams: [{name: echo, url: %q, auth: %q, keys: [{id: echo, secret: %s}]}]\n",
			secretProxy, t.TempDir(), vendor.URL, auth, secret)
		c, err := parseConfig([]byte(conf), "echo.yaml")
		require.NoError(t, err)
		s, err := c.resolve(os.LookupEnv)
		require.NoError(t, err)
		srv, err := newServer(s, log)
		require.NoError(t, err)
		hs := httptest.NewServer(srv.handler())
		for _, r := range []struct{ method, path string }{
			{http.MethodGet, "/v1/x/redirect"},
			{http.MethodGet, "/v1/models?limit=5&KEY=" + secretProxy},
			{http.MethodPost, "/v1/x/headers?Key=" + secretProxy},
			{http.MethodPost, "/v1/nowhere"},
			{http.MethodPost, "/v1/x/masked"}, // a 401: the route is benched after it
		} {
			view, _ := clientView(t, r.method, hs.URL+r.path, http.Header{"Authorization": {"Bearer " + secretProxy}})
			path, _, _ := strings.Cut(r.path, "?")
			out.add(fmt.Sprintf("proxy answer (%s) to %s %s from a vendor that echoes", auth, r.method, path), []byte(view))
		}
		hs.Close()
		srv.close()
	}
	received := strings.Join(rec.requests(), "\n")
	require.Contains(t, received, secretEchoQuery, "the vendor got its keys")
	require.Contains(t, received, secretEchoHead)
	require.NotContains(t, received, secretProxy, "the vendor never got the proxy token")
}

// directClients sends requests through pools of the secrets, as library
// users do, with spans and metrics of their own, and adds the errors they
// return, the spans and the metrics to out.
func directClients(t *testing.T, out outputs, vendor, gone string) {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	keys := []keypool.Key{{Secret: secretLive}, {Secret: secretRevoked}, {Secret: secretThrottled, Paid: true}}
	state := t.TempDir()
	store, err := keypool.OpenBadgerStore(state)
	require.NoError(t, err)
	pool, err := keypool.New("openai", keys, keypool.WithTracerProvider(tp), keypool.WithMeterProvider(mp),
		keypool.WithStore(store), keypool.QueryAuth("key"))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}
	for range 4 {
		resp, err := client.Post(vendor+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[]}`))
		if err != nil {
			out.addf("error of a client", "%v %+v %#v", err, err, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		out.addf("answer to a client", "%d %s", resp.StatusCode, b)
	}
	_, err = client.Get(gone + "/v1beta/models/m:generateContent")
	var ue *url.Error
	require.ErrorAs(t, err, &ue)
	out.addf("url.Error of a vendor gone", "%v %+v %#v", err, err, ue.URL)
	err = pool.Do(t.Context(), "m", func(_ context.Context, k keypool.Key) error {
		return &keypool.ProviderError{Provider: "openai", KeyID: k.ID, Kind: keypool.KindAuth, Status: 401}
	})
	var na *keypool.NoAvailableKeyError
	require.ErrorAs(t, err, &na)
	var pe *keypool.ProviderError
	require.ErrorAs(t, err, &pe)
	out.addf("errors of Do", "%v %+v %#v %#v", err, na, na, pe)
	for _, ks := range pool.Stats() {
		out.addf("stats", "%v %+v %#v", ks, ks, ks)
	}
	route := keypool.Route{Name: "openai", Pool: pool, URL: &url.URL{Scheme: "http", Host: "vendor.test"}}
	fb, err := keypool.NewFallback([]keypool.Route{route})
	require.NoError(t, err)
	out.addf("pool, route and fallback", "%v %+v %v %+v %v %+v", pool, pool, route, route, fb, fb)
	require.NoError(t, pool.Close())
	require.NoError(t, store.Close())
	require.NoError(t, tp.Shutdown(t.Context()))
	for _, span := range spans.Ended() {
		out.addf("span of a client", "%s %v %v %v", span.Name(), span.Attributes(), span.Events(), span.Status())
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	labels := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out.addf("metric "+m.Name, "%+v", m)
			for _, set := range metricAttributes(m.Data) {
				labels++
				out.addf("metric labels of "+m.Name, "%s", set.Encoded(attribute.DefaultEncoder()))
			}
		}
	}
	require.Positive(t, labels, "metric labels recorded")
	require.NoError(t, filepath.WalkDir(state, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		out.add("state file of a client "+filepath.Base(path), data)
		return err
	}))
}

// metricAttributes returns the attribute sets of a metric's data points.
func metricAttributes(data metricdata.Aggregation) []attribute.Set {
	var sets []attribute.Set
	switch d := data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	}
	return sets
}

// configErrors adds to out what keypool serve says of configurations that
// hold the secrets and are wrong.
func configErrors(t *testing.T, out outputs) {
	dir := t.TempDir()
	confs := map[string]string{
		"two keys of one secret": fmt.Sprintf("proxy_tokens: [%s]\nstate: %s\nupstreams: [{url: 'https://x', keys: [{secret: %s}, {secret: %s}]}]\n", secretProxy, dir, secretLive, secretLive),
		"a secret and an env":    fmt.Sprintf("proxy_tokens: [%s]\nupstreams: [{url: 'https://x', keys: [{secret: %s, env: X}]}]\n", secretProxy, secretLive),
		"a negative limit":       fmt.Sprintf("proxy_tokens: [%s]\nstate: %s\nupstreams: [{url: 'https://x', keys: [{secret: %s, limits: {rpm: -1}}]}]\n", secretProxy, dir, secretLive),
		"an unknown field":       fmt.Sprintf("proxy_tokens: [%s]\nupstreams: [{url: 'https://x', keys: [{secret: %s, colour: red}]}]\n", secretProxy, secretLive),
		"a bad URL":              fmt.Sprintf("proxy_tokens: [%s]\nupstreams: [{url: 'ftp://x', keys: [{secret: %s}]}]\n", secretProxy, secretLive),
		"no upstream":            fmt.Sprintf("proxy_tokens: [%s]\n", secretProxy),
		"a key file of one secret twice": fmt.Sprintf("proxy_tokens: [%s]\nstate: %s\nupstreams: [{url: 'https://x', keys: [{file: %s}]}]\n",
			secretProxy, dir, filepath.Join(dir, "keys.txt")),
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keys.txt"), []byte(secretLive+"\n"+secretLive+"\n"), 0o600))
	for name, conf := range confs {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		require.NoError(t, os.WriteFile(path, []byte(conf), 0o600))
		var stdout, stderr bytes.Buffer
		status := run(t.Context(), []string{"serve", "-config", path}, &stdout, &stderr)
		require.NotZero(t, status, "keypool serve with %s", name)
		out.addf("keypool serve with "+name, "%s%s", stdout.Bytes(), stderr.Bytes())
	}
}

// printed adds to out the values that hold secrets, printed with every
// verb. (fmt calls no method of a value in an unexported field, so a Key
// there prints whole: the proxy's own settings are never printed.)
func printed(t *testing.T, out outputs) {
	t.Helper()
	k := keypool.Key{Secret: secretLive, ID: "live", Paid: true}
	values := map[string]any{
		"Key":        k,
		"*Key":       &k,
		"[]Key":      []keypool.Key{k, {Secret: secretRevoked}},
		"map of Key": map[string]keypool.Key{"k": k},
		"struct of Key": struct {
			Name string
			Key  keypool.Key
		}{"x", k},
	}
	for name, v := range values {
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
			out.addf("fmt "+verb+" of "+name, verb, v)
		}
	}
	err := errors.Join(&keypool.ProviderError{Provider: "openai", KeyID: k.ID, Kind: keypool.KindRate}, &keypool.NoAvailableKeyError{Provider: "openai"})
	out.addf("errors", "%v %+v %#v", err, err, err)
}
