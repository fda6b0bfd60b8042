package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// serveReal runs the proxy for the YAML configuration as keypool serve
// does — its own http.Server, with its timeouts — on a loopback port, and
// returns the address.
func serveReal(t testing.TB, conf string) string {
	t.Helper()
	var c config
	require.NoError(t, yaml.Unmarshal([]byte(conf), &c))
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	return serveSettings(t, s)
}

// serveSettings is serveReal for a configuration already resolved, whose
// test-only settings, such as its clock, the test may have set.
func serveSettings(t testing.TB, s *settings) string {
	t.Helper()
	addr, _ := serveServer(t, s)
	return addr
}

// serveServer is serveSettings that also returns the server.
func serveServer(t testing.TB, s *settings) (string, *server) {
	t.Helper()
	srv, err := newServer(s, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-done)
	})
	return ln.Addr().String(), srv
}

// recorder is an upstream that records the requests it gets.
type recorder struct {
	mu   sync.Mutex
	seen []string // "METHOD URI\nheaders"
}

func (rec *recorder) add(r *http.Request) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", r.Method, r.RequestURI)
	_ = r.Header.Write(&b)
	rec.mu.Lock()
	rec.seen = append(rec.seen, b.String())
	rec.mu.Unlock()
}

func (rec *recorder) requests() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.seen...)
}

// recordingUpstream starts an upstream that records each request and
// answers "{}".
func recordingUpstream(t *testing.T) (*recorder, *httptest.Server) {
	rec := &recorder{}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(upstream.Close)
	return rec, upstream
}

// rawExchange writes a raw request to addr and returns all that comes back
// before the connection closes or wait passes.
func rawExchange(t *testing.T, addr, request string, wait time.Duration) string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, request)
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(wait)))
	b, _ := io.ReadAll(conn)
	return string(b)
}

// The upstream secret of the boundary tests, and a key's masked echo of it
// as OpenAI writes one.
const (
	boundarySecret = "sk-BOUNDARY-0f6e2d9c1b8a"
	boundaryMasked = "sk-BOU*****************1b8a"
)

// echoVendor is an upstream that gives back the key it got in every way a
// vendor may: in redirects (its own and a ServeMux's trailing-slash one),
// in headers naming URLs, in cookies, in informational answers, in
// trailers, and in error bodies that quote the URL or mask the key.
func echoVendor(rec *recorder) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/models/", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"data":[]}`) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		if key == "" {
			key = r.Header.Get("X-Api-Key")
		}
		u := "https://vendor.test" + r.URL.RequestURI()
		switch {
		case strings.HasSuffix(r.URL.Path, "/redirect"):
			w.Header().Set("Location", u)
			w.Header().Set("Set-Cookie", "session="+key)
			w.WriteHeader(http.StatusFound)
			_, _ = fmt.Fprintf(w, `<a href="%s">Found</a>`, u)
		case strings.HasSuffix(r.URL.Path, "/headers"):
			w.Header().Set("Link", "<"+u+">; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("Content-Location", u)
			w.Header().Set("Refresh", "0; url="+u)
			w.Header().Set("X-Request-Url", u)
			w.Header().Set("Set-Cookie", "session="+key)
			w.Header().Set("Trailer", "X-Echo-Key")
			_, _ = io.WriteString(w, `{"ok":true}`)
			w.Header().Set("X-Echo-Key", key)
		case strings.HasSuffix(r.URL.Path, "/gzip") && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip"):
			w.Header().Set("Content-Encoding", "gzip")
			w.WriteHeader(http.StatusBadRequest)
			zw := gzip.NewWriter(w)
			_, _ = fmt.Fprintf(zw, `{"error":{"message":"bad request to %s"}}`, u)
			_ = zw.Close()
		case strings.HasSuffix(r.URL.Path, "/brotli"):
			w.Header().Set("Content-Encoding", "br") // not brotli: the key as is, unreadable to a proxy that trusts the name
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"bad request to %s"}}`, u)
		case strings.HasSuffix(r.URL.Path, "/keys"): // key management: the key in a success
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"data":[{"id":"live","key":%q}]}`, key)
		case strings.HasSuffix(r.URL.Path, "/keys-created"):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = fmt.Fprintf(w, `{"id":"live","key":%q}`, key)
		case strings.HasSuffix(r.URL.Path, "/keys-chunked"): // no length, the key across two writes
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"data":[{"id":"live","key":"`+key[:8])
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, key[8:]+`"}]}`)
		case strings.HasSuffix(r.URL.Path, "/keys-gzip") && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip"):
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = fmt.Fprintf(zw, `{"data":[{"id":"live","key":%q}]}`, key)
			_ = zw.Close()
		case strings.HasSuffix(r.URL.Path, "/keys-brotli"):
			w.Header().Set("Content-Encoding", "br") // not brotli: the key as is
			_, _ = fmt.Fprintf(w, `{"data":[{"id":"live","key":%q}]}`, key)
		case strings.HasSuffix(r.URL.Path, "/masked"):
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s***%s. You can find your API key at https://vendor.test."}}`, key[:6], key[len(key)-4:])
		default:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = fmt.Fprintf(w, `{"error":{"message":"Unknown request URL: %s %s. Please check the URL for typos."}}`, r.Method, u)
		}
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.add(r)
		mux.ServeHTTP(w, r)
	})
}

// clientView is all a client sees of an answer: informational answers'
// headers, the status, the headers, the body and the trailers.
func clientView(t *testing.T, method, url string, header http.Header) (string, *http.Response) {
	t.Helper()
	var early []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		early = append(early, fmt.Sprintf("%d %v", code, h))
		return nil
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), method, url, strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header = header
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	return fmt.Sprintf("%v\n%d\n%v\n%s\n%v", early, resp.StatusCode, resp.Header, body, resp.Trailer), resp
}

func TestProxyNeverHandsOutTheUpstreamKey(t *testing.T) {
	rec := &recorder{}
	upstream := httptest.NewServer(echoVendor(rec))
	t.Cleanup(upstream.Close)
	for _, auth := range []string{"query:key", "header:x-api-key"} {
		t.Run(auth, func(t *testing.T) {
			base, _ := startProxy(t, oneUpstream(t, upstream.URL, fmt.Sprintf("auth: %q, keys: [{id: live, secret: %s}]", auth, boundarySecret)))
			tests := []struct {
				name, method, path string
				status             int
				shows              string // what stands for the key
			}{
				{"a redirect", http.MethodGet, "/v1/x/redirect", http.StatusFound, map[string]string{"query:key": "[redacted:live]"}[auth]},
				{"a mux's trailing-slash redirect", http.MethodGet, "/v1/models?limit=5", 0, ""},
				{"headers, early hints and trailers", http.MethodPost, "/v1/x/headers", http.StatusOK, ""},
				{"an error quoting the URL", http.MethodPost, "/v1/nowhere", http.StatusNotFound, ""},
				{"a gzipped error quoting the URL", http.MethodPost, "/v1/x/gzip", http.StatusBadRequest, "bad request to "},
				{"an error in an encoding the proxy cannot read", http.MethodPost, "/v1/x/brotli", http.StatusBadRequest, "which the proxy cannot check for keys; withheld"},
				{"a success that holds the key", http.MethodGet, "/v1/x/keys", http.StatusOK, `"key":"[redacted:live]"`},
				{"a 201 that holds the key", http.MethodPost, "/v1/x/keys-created", http.StatusCreated, `"key":"[redacted:live]"`},
				{"a success of no length, the key across two writes", http.MethodGet, "/v1/x/keys-chunked", http.StatusOK, `"key":"[redacted:live]"`},
				{"a gzipped success", http.MethodGet, "/v1/x/keys-gzip", http.StatusOK, `"key":"[redacted:live]"`},
				{"a success in an encoding the proxy cannot read", http.MethodGet, "/v1/x/keys-brotli", http.StatusBadGateway, "answered 200 with a body in \"br\" encoding, which the proxy cannot check for keys; withheld"},
				// Last: a 401 benches the key.
				{"a masked echo", http.MethodPost, "/v1/x/masked", http.StatusUnauthorized, "Incorrect API key provided: [redacted:live]. You"},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					// The client takes gzip, and reads what it gets as it is.
					view, resp := clientView(t, tt.method, base+tt.path, http.Header{"Authorization": {"Bearer " + proxyToken}, "Accept-Encoding": {"gzip"}})
					if tt.status != 0 {
						assert.Equal(t, tt.status, resp.StatusCode, view)
					}
					assert.NotContains(t, view, boundarySecret)
					assert.NotContains(t, view, boundarySecret[len(boundarySecret)-8:], "no part of the key")
					assert.NotContains(t, view, "1b8a.", "no masked echo")
					assert.Empty(t, resp.Header.Values("Set-Cookie"), "no upstream cookie")
					assert.Contains(t, view, tt.shows)
				})
			}
		})
	}
	require.NotEmpty(t, rec.requests())
	assert.Contains(t, strings.Join(rec.requests(), "\n"), boundarySecret, "the upstream did get the key")
}

// A success too long to hold passes whole, as it comes, and so do streams,
// unheld: their first part reaches the client before the upstream sends
// the rest.
func TestProxyPassesLongSuccessesAndStreamsAsTheyCome(t *testing.T) {
	long := `{"data":"` + strings.Repeat("x", maxHeldBody) + `"}`
	release := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/long"):
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(long)))
			_, _ = io.WriteString(w, long)
		case strings.HasSuffix(r.URL.Path, "/long-chunked"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, long[:100])
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, long[100:])
		default: // a stream: a Gemini JSON array, or Ollama's lines
			if strings.HasSuffix(r.URL.Path, "/api/chat") {
				w.Header().Set("Content-Type", "application/x-ndjson")
			} else {
				w.Header().Set("Content-Type", "application/json")
			}
			_, _ = io.WriteString(w, "[{\"n\":1}\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, ",{\"n\":2}]\n")
		}
	}))
	t.Cleanup(upstream.Close)
	t.Cleanup(func() { close(release) })
	base, _ := startProxy(t, oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]"))
	do := func(path string) *http.Response {
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req) // a stream held back fails, rather than hangs
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, path := range []string{"/v1/long", "/v1/long-chunked"} {
		b, err := io.ReadAll(do(path).Body)
		require.NoError(t, err)
		assert.Equal(t, long, string(b), "%s passes whole", path)
	}
	for _, path := range []string{"/v1beta/models/gemini-2.0-flash:streamGenerateContent", "/api/chat"} {
		first, err := bufio.NewReader(do(path).Body).ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, "[{\"n\":1}\n", first, "%s: the first part arrives while the upstream holds the rest", path)
	}
}

func TestProxyStripsEveryCopyOfTheToken(t *testing.T) {
	rec, upstream := recordingUpstream(t)
	for _, auth := range []string{"bearer", "query:key", "header:x-goog-api-key"} {
		t.Run(auth, func(t *testing.T) {
			base, _ := startProxy(t, oneUpstream(t, upstream.URL, fmt.Sprintf("auth: %q, keys: [{secret: sk-upstream-key}]", auth)))
			query := "?KEY=" + proxyToken + "&Key=" + proxyToken + "&key=" + proxyToken + "&key=" + proxyToken +
				"&api_key=" + proxyToken + "&other=a%20" + proxyToken + "&alt=json&x=1;token=" + proxyToken
			req, err := http.NewRequest(http.MethodPost, base+"/v1beta/models/m:generateContent"+query, strings.NewReader("{}"))
			require.NoError(t, err)
			req.Header["authorization"] = []string{"Bearer " + proxyToken} // sent in lower case
			req.Header.Set("X-Api-Key", proxyToken)
			req.Header.Add("X-Goog-Api-Key", proxyToken)
			req.Header.Add("X-Goog-Api-Key", proxyToken)
			req.Header.Set("Api-Key", proxyToken)
			req.Header.Set("X-Custom-Auth", "Token "+proxyToken)
			req.Header.Set("X-Kept", "yes")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
			seen := rec.requests()
			got := seen[len(seen)-1]
			assert.NotContains(t, got, proxyToken, "the upstream never sees the proxy token")
			assert.Contains(t, got, "sk-upstream-key", "it sees the pool's key")
			assert.Contains(t, got, "alt=json", "other parameters pass")
			assert.Contains(t, got, "X-Kept: yes", "other headers pass")
		})
	}
}

// A browser sends its cookies for the proxy's address with every request,
// the status page's session among them: none reaches the upstream.
func TestProxyNeverForwardsCookies(t *testing.T) {
	rec, upstream := recordingUpstream(t)
	base, _ := startProxy(t, oneUpstream(t, upstream.URL, "keys: [{secret: sk-upstream-key}]"))
	c := sessionOf(login(t, base, proxyToken, nil))
	require.NotNil(t, c, "a status page session")
	req, err := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	req.AddCookie(c)
	req.AddCookie(&http.Cookie{Name: "other_app", Value: "its-own-session"})
	req.Header.Add("Cookie", "third=a")
	req.Header.Set("X-Kept", "yes")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	seen := rec.requests()
	require.Len(t, seen, 1)
	assert.NotContains(t, strings.ToLower(seen[0]), "cookie", "no cookie header of any case")
	for _, v := range []string{c.Value, "its-own-session", "third=a"} {
		assert.NotContains(t, seen[0], v)
	}
	assert.Contains(t, seen[0], "X-Kept: yes", "other headers pass")
}

func TestProxyRefusesMethodsNoAPIUses(t *testing.T) {
	rec, upstream := recordingUpstream(t)
	addr := serveReal(t, oneUpstream(t, upstream.URL, "keys: [{secret: sk-upstream-key}]"))
	auth := "Authorization: Bearer " + proxyToken + "\r\n"
	for _, line := range []string{
		"TRACE /v1/models HTTP/1.1",
		"TRACE /status HTTP/1.1",
		"CONNECT api.openai.com:443 HTTP/1.1",
		"PROPFIND /v1/files HTTP/1.1",
		"BREW /v1/models HTTP/1.1",
	} {
		t.Run(line, func(t *testing.T) {
			answer := rawExchange(t, addr, line+"\r\nHost: "+addr+"\r\n"+auth+"Cookie: keypool_session=x\r\n\r\n", 5*time.Second)
			require.True(t, strings.HasPrefix(answer, "HTTP/1.1 405 "), "%s", answer)
			assert.Contains(t, answer, "Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n")
			assert.NotContains(t, answer, proxyToken, "nothing of the request is echoed")
		})
	}
	assert.Empty(t, rec.requests(), "nothing reached the upstream")
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions} {
		req, err := http.NewRequest(method, "http://"+addr+"/v1/files", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, method)
	}
	assert.Len(t, rec.requests(), 7, "an API's methods are forwarded")
}

func TestProxyRefusesPathsOutsideTheRoute(t *testing.T) {
	rec, upstream := recordingUpstream(t)
	addr := serveReal(t, oneUpstream(t, upstream.URL+"/openai", "auth: 'query:key', keys: [{secret: sk-route-key}]"))
	paths := []string{
		"/v1/%2e%2e/%2e%2e/admin",
		"/v1/%2E%2E/%2E%2E/admin",
		"/v1/.%2e/.%2E/admin",
		"/v1/%2e./%2e./admin",
		"/v1/..%2f..%2fadmin",
		"/v1/%2e%2e%2f%2e%2e%2fadmin",
		"/v1/%252e%252e/%252e%252e/admin",
		"/v1/%2e%2e%5c%2e%2e%5cadmin",
		"/v1/..\\..\\admin",
		"/v1/%2e/chat",
		"/v1/a%2f%2fb",
		"/v1/../../admin",
		"/%2e%2e",
	}
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			answer := rawExchange(t, addr, "GET "+p+"?key="+proxyToken+" HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n", 5*time.Second)
			status, _, _ := strings.Cut(answer, "\r\n")
			// No mux sees a forwarded path: a literal ".." is refused
			// as the encoded forms are, not redirected to the clean path.
			assert.Equal(t, "HTTP/1.1 400 Bad Request", status, "%s", answer)
			assert.NotContains(t, answer, "sk-route-key")
		})
	}
	answer := rawExchange(t, addr, "GET /v1/models?key="+proxyToken+" HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n", 5*time.Second)
	require.True(t, strings.HasPrefix(answer, "HTTP/1.1 200 OK"), "a clean path is forwarded: %s", answer)
	seen := rec.requests()
	require.Len(t, seen, 1, "only the clean path reached the upstream: %v", seen)
	for _, r := range seen {
		assert.True(t, strings.HasPrefix(r, "GET /openai/v1/models?"), "the upstream saw %q, outside /openai/", r)
	}
}

func TestEscapesRoute(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"/v1/chat/completions", false},
		{"/v1/models/", false},
		{"/", false},
		{"/v1beta/models/gemini-2.0-flash:generateContent", false},
		{"/v1/files/file-abc%20def", false},
		{"/v1/models/a..b", false},
		{"/v1/100%", false},
		{"/v1/../admin", true},
		{"/v1/./chat", true},
		{"/v1//chat", true},
		{"/v1/..", true},
		{"/v1/..\\admin", true},
		{"/v1/%2e%2e/admin", true},
		{"/v1/%252e%252e/admin", true},
		{"", true},
		{"*", true},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, escapesRoute(tt.path), "escapesRoute(%q)", tt.path)
	}
}

func TestProxyCutsOffASlowBody(t *testing.T) {
	rec := &recorder{}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { rec.add(r) }))
	t.Cleanup(upstream.Close)
	addr := serveReal(t, "body_timeout: 300ms\n"+oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]"))
	start := time.Now()
	answer := rawExchange(t, addr, "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer "+proxyToken+
		"\r\nContent-Length: 100\r\n\r\n{\"model\":", 5*time.Second)
	took := time.Since(start)
	assert.Less(t, took, 3*time.Second, "the connection was cut off, not left open: %q", answer)
	assert.True(t, answer == "" || strings.HasPrefix(answer, "HTTP/1.1 408 "), "answer %q", answer)
	assert.Empty(t, rec.requests(), "nothing reached the upstream")
}

func TestProxyClosesIdleConnections(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") }))
	t.Cleanup(upstream.Close)
	addr := serveReal(t, "header_timeout: 300ms\nidle_timeout: 300ms\n"+oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]"))

	// Connections that never send a request, more than a small fd limit.
	var idle []net.Conn
	for range 300 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		idle = append(idle, c)
	}
	// A kept-alive connection, idle after one request.
	kept, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	_, err = io.WriteString(kept, "GET /v1/models HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer "+proxyToken+"\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(kept), nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	start := time.Now()
	for _, c := range append(idle, kept) {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, io.EOF, "the proxy closed the connection")
		c.Close()
	}
	assert.Less(t, time.Since(start), 3*time.Second)

	// A client without the token is told so, and the connection ends.
	answer := rawExchange(t, addr, "GET /v1/models HTTP/1.1\r\nHost: proxy\r\n\r\n", 5*time.Second)
	assert.True(t, strings.HasPrefix(answer, "HTTP/1.1 401 "), "%s", answer)
	assert.Contains(t, answer, "Connection: close")
}

func TestProxyRefusesOversizedHeaders(t *testing.T) {
	rec, upstream := recordingUpstream(t)
	addr := serveReal(t, oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]"))
	request := func(padding int) string {
		return "GET /v1/models HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer " + proxyToken +
			"\r\nX-Padding: " + strings.Repeat("p", padding) + "\r\nConnection: close\r\n\r\n"
	}
	answer := rawExchange(t, addr, request(2*defaultMaxHeaderBytes), 5*time.Second)
	assert.True(t, strings.HasPrefix(answer, "HTTP/1.1 431 "), "headers over max_header_bytes: %.200q", answer)
	assert.Empty(t, rec.requests(), "nothing reached the upstream")
	answer = rawExchange(t, addr, request(defaultMaxHeaderBytes/2), 5*time.Second)
	assert.True(t, strings.HasPrefix(answer, "HTTP/1.1 200 "), "headers within it: %.200q", answer)
}

// A connection whose headers never end holds what was read of them; at
// most max_pending_conns such connections are held, the newest, and a
// client that sends its request at once is answered through them.
func TestProxyBoundsPendingConnections(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") }))
	t.Cleanup(upstream.Close)
	var c config
	require.NoError(t, yaml.Unmarshal([]byte("max_pending_conns: 20\nheader_timeout: 1m\n"+oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]")), &c))
	s, err := c.resolve(func(string) (string, bool) { return "", false })
	require.NoError(t, err)
	addr, srv := serveServer(t, s)
	var flood []net.Conn
	for range 100 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nX-Never: ends\r\n")
		require.NoError(t, err)
		flood = append(flood, c)
	}
	t.Cleanup(func() {
		for _, c := range flood {
			c.Close()
		}
	})
	for i, c := range flood[:80] {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		require.Error(t, err)
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "connection %d, of the 80 that waited longest, was closed", i)
	}
	assert.Equal(t, 20, srv.pending.count(), "the 20 newest are held")

	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/models", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "a client that sends its request at once")
	assert.Equal(t, 19, srv.pending.count(), "its connection, once its request is in, is not held: the oldest of the flood made room for it")
}

func TestProxyStreamOutlivesTheWriteTimeout(t *testing.T) {
	t.Parallel() // it waits in real time: on a process, a server or a bench
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/slow" {
			time.Sleep(900 * time.Millisecond) // a completion that does not stream
			_, _ = io.WriteString(w, `{"done":true}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 12 {
			_, _ = fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(upstream.Close)
	addr := serveReal(t, "write_timeout: 300ms\n"+oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]"))

	start := time.Now()
	resp, err := chat(t, "http://"+addr, true)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "the stream was not cut")
	assert.GreaterOrEqual(t, time.Since(start), time.Second, "the stream ran past the write timeout")
	assert.Equal(t, 12, strings.Count(string(b), "data: {"), "every event arrived")
	assert.True(t, strings.HasSuffix(string(b), "data: [DONE]\n\n"))

	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/slow", strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, `{"done":true}`, string(b), "waiting for the upstream does not count against the write timeout")
}

func TestProxyRefusesTooLargeBodies(t *testing.T) {
	var reached atomic.Int64
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(upstream.Close)
	addr := serveReal(t, "max_request_body: 1KiB\n"+oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]"))
	send := func(body io.Reader, length int64) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", body)
		req.ContentLength = length
		req.Header.Set("Authorization", "Bearer "+proxyToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	big := strings.Repeat("x", 2048)
	assert.Equal(t, http.StatusRequestEntityTooLarge, send(strings.NewReader(big), int64(len(big))), "a stated length over the bound")
	assert.Equal(t, http.StatusRequestEntityTooLarge, send(io.MultiReader(strings.NewReader(big)), -1), "a chunked body over the bound")
	assert.Equal(t, int64(0), reached.Load(), "neither reached the upstream")
	assert.Equal(t, http.StatusOK, send(strings.NewReader("{}"), 2), "a body within it")
}

func TestProxyKeepsItsUpstreamConnections(t *testing.T) {
	var opened atomic.Int64
	upstream := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(time.Millisecond) // long enough for requests to overlap
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	upstream.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	upstream.Start()
	t.Cleanup(upstream.Close)
	base, _ := startProxy(t, oneUpstream(t, upstream.URL, "idle_conns: 16, keys: [{secret: sk-a}, {secret: sk-b}]"))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 25 {
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
				req.Header.Set("Authorization", "Bearer "+proxyToken)
				resp, err := client.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	// Go's default transport keeps 2 idle connections to a host: 16 at a
	// time, it opens one for most requests (235 of 400 when measured).
	assert.LessOrEqual(t, opened.Load(), int64(32), "400 requests, 16 at a time, over about 16 upstream connections")
}

func TestProxyStreamsWhileALongBodyIsSent(t *testing.T) {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = r.Body.Read(make([]byte, 1)) // answers before it reads the body
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 5 {
			_, _ = fmt.Fprintf(w, "data: {\"n\":%d}\n\n", i)
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}))
	t.Cleanup(upstream.Close)
	addr := serveReal(t, oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]"))
	body := strings.Repeat("x", 4<<20) // too long to hold: sent as it arrives
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+proxyToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err, "the answer was not cut: %q", b)
	assert.Equal(t, 5, strings.Count(string(b), "data: "))
}

func TestProxyCutsOffAClientThatStopsReading(t *testing.T) {
	gone := make(chan time.Time, 1)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { gone <- time.Now() }()
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := []byte("data: " + strings.Repeat("x", 64<<10) + "\n\n")
		for range 4096 { // 256 MiB, far more than the sockets between hold
			if _, err := w.Write(chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(upstream.Close)
	addr := serveReal(t, "write_timeout: 300ms\n"+oneUpstream(t, upstream.URL, "keys: [{secret: sk-a}]"))
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer "+proxyToken+"\r\nContent-Length: 2\r\n\r\n{}")
	require.NoError(t, err)
	stopped := time.Now() // the client reads nothing
	select {
	case at := <-gone:
		assert.Less(t, at.Sub(stopped), 5*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy still writes to a client that stopped reading")
	}
}
