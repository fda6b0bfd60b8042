package keypool

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// testClock is a clock tests move by hand.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock {
	return &testClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// answer is one scripted vendor answer.
type answer struct {
	status int
	header map[string]string
	body   string
}

// received is one request a vendor got.
type received struct {
	key  string
	body string
}

// vendor is an httptest vendor scripted per key: each key answers its
// scripted answers in order, then 200 with a small JSON body.
type vendor struct {
	mu     sync.Mutex
	script map[string][]answer
	got    []received
}

func newVendor(t *testing.T) (*vendor, *httptest.Server) {
	t.Helper()
	v := &vendor{script: map[string][]answer{}}
	srv := httptest.NewServer(v)
	t.Cleanup(srv.Close)
	return v, srv
}

// on scripts the next answers of the key with secret key.
func (v *vendor) on(key string, answers ...answer) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.script[key] = append(v.script[key], answers...)
}

func (v *vendor) received() []received {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]received(nil), v.got...)
}

// keys returns the keys of the requests received, in order.
func (v *vendor) keys() []string {
	var out []string
	for _, r := range v.received() {
		out = append(out, r.key)
	}
	return out
}

func (v *vendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if k := r.Header.Get("X-Api-Key"); k != "" {
		key = k
	}
	if k := r.URL.Query().Get("key"); k != "" {
		key = k
	}
	body, _ := io.ReadAll(r.Body)
	v.mu.Lock()
	v.got = append(v.got, received{key: key, body: string(body)})
	a := answer{status: http.StatusOK, body: `{"ok":true}`}
	if s := v.script[key]; len(s) > 0 {
		a, v.script[key] = s[0], s[1:]
	}
	v.mu.Unlock()
	for k, val := range a.header {
		w.Header().Set(k, val)
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

// rateLimited is a 429 asking for a sleep of secs seconds.
func rateLimited(secs string) answer {
	return answer{status: http.StatusTooManyRequests, header: map[string]string{"Retry-After": secs},
		body: `{"error":{"type":"rate_limit_exceeded"}}`}
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	mu     sync.Mutex
	closed int
}

func (c *closeCounter) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed++
	return nil
}

func (c *closeCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// evictions collects what OnEvict reports.
type evictions struct {
	mu   sync.Mutex
	list []Eviction
}

func (e *evictions) add(ev Eviction) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *evictions) all() []Eviction {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Eviction(nil), e.list...)
}

// fixture is a pool of threeKeys on a test clock over a scripted vendor,
// with what OnEvict reported.
type fixture struct {
	clock  *testClock
	vendor *vendor
	url    string
	ev     *evictions
	pool   *Pool
	client *http.Client
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	f := &fixture{clock: newTestClock(), ev: &evictions{}}
	var srv *httptest.Server
	f.vendor, srv = newVendor(t)
	f.url = srv.URL
	pool, err := New("test", threeKeys(), append([]Option{WithClock(f.clock.Now), OnEvict(f.ev.add)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.pool = pool
	f.client = &http.Client{Transport: pool.Transport(nil)}
	return f
}
