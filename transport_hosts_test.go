package keypool

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a host that records the requests it gets, whole.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
	srv  *httptest.Server
}

func newRecorder(t *testing.T, h func(w http.ResponseWriter, r *http.Request)) *recorder {
	t.Helper()
	rec := &recorder{}
	rec.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r.Clone(r.Context()))
		rec.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(rec.srv.Close)
	return rec
}

func (r *recorder) got() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.reqs...)
}

// carries reports whether a request holds secret anywhere: a header, the
// URL.
func carries(r *http.Request, secret string) bool {
	for _, vs := range r.Header {
		for _, v := range vs {
			if strings.Contains(v, secret) {
				return true
			}
		}
	}
	return strings.Contains(r.URL.String(), secret) || strings.Contains(r.URL.String(), url.QueryEscape(secret))
}

func TestKeysNeverFollowARedirectToAnotherHost(t *testing.T) {
	const secret = "sk-live+secret/1"
	auths := []struct {
		name string
		opt  Option
	}{
		{"bearer", BearerAuth()},
		{"header", HeaderAuth("x-goog-api-key")},
		{"query", QueryAuth("key")},
	}
	for _, a := range auths {
		for _, status := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
			t.Run(a.name+"/"+http.StatusText(status), func(t *testing.T) {
				other := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "elsewhere") })
				vendor := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/v1/same" {
						_, _ = io.WriteString(w, "same host")
						return
					}
					// A vendor that echoes the request's query into the
					// redirect, key and all.
					loc := other.srv.URL + "/landing"
					if r.URL.RawQuery != "" {
						loc += "?" + r.URL.RawQuery
					}
					if r.URL.Path == "/v1/hop" {
						loc = "/v1/same"
					}
					http.Redirect(w, r, loc, status)
				})
				pool, err := New("test", []Key{{Secret: secret}, {Secret: "sk-two"}}, a.opt)
				require.NoError(t, err)
				client := &http.Client{Transport: pool.Transport(nil)}
				resp, err := client.Post(vendor.srv.URL+"/v1/chat?alt=sse", "application/json", strings.NewReader(`{"model":"m"}`))
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, "elsewhere", string(body), "the redirect is followed")
				require.NotEmpty(t, other.got())
				for _, r := range other.got() {
					assert.False(t, carries(r, secret), "the other host got the key: %v %v", r.URL, r.Header)
					assert.False(t, carries(r, "sk-two"), "the other host got a key: %v %v", r.URL, r.Header)
				}

				resp, err = client.Get(vendor.srv.URL + "/v1/hop")
				require.NoError(t, err)
				body, _ = io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, "same host", string(body))
				last := vendor.got()[len(vendor.got())-1]
				assert.True(t, carries(last, secret) || carries(last, "sk-two"), "a redirect to the same host carries a key")
			})
		}
	}
}

func TestQueryKeyEchoedInLocationIsRemoved(t *testing.T) {
	vendor := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "<https://cdn.example/x?"+r.URL.RawQuery+">; rel=next")
		http.Redirect(w, r, "https://cdn.example/x?"+r.URL.RawQuery, http.StatusFound)
	})
	pool, err := New("test", []Key{{Secret: "sk-echo"}}, QueryAuth("key"))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(vendor.srv.URL + "/v1/models?page=2")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "https://cdn.example/x?page=2", resp.Header.Get("Location"))
	assert.NotContains(t, resp.Header.Get("Link"), "sk-echo")
}

func TestWithHostsPinsThePool(t *testing.T) {
	other := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "elsewhere") })
	vendor := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/away" {
			http.Redirect(w, r, other.srv.URL+"/x", http.StatusFound)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	u, _ := url.Parse(vendor.srv.URL)
	pool, err := New("test", []Key{{Secret: "sk-pinned"}}, WithHosts(u.Host))
	require.NoError(t, err)
	client := &http.Client{Transport: pool.Transport(nil)}

	resp, err := client.Get(vendor.srv.URL + "/v1/models")
	require.NoError(t, err)
	resp.Body.Close()
	assert.True(t, carries(vendor.got()[0], "sk-pinned"))

	_, err = client.Get(other.srv.URL + "/v1/models")
	require.ErrorContains(t, err, "is not a host of the pool (WithHosts)")
	assert.Empty(t, other.got(), "nothing is sent to a host outside WithHosts")

	resp, err = client.Get(vendor.srv.URL + "/v1/away")
	require.NoError(t, err)
	resp.Body.Close()
	require.Len(t, other.got(), 1, "a redirect away is followed")
	assert.False(t, carries(other.got()[0], "sk-pinned"), "without the key")
}

func TestWithHostsRejects(t *testing.T) {
	for _, hosts := range [][]string{nil, {""}, {"https://api.openai.com"}, {"api.openai.com/v1"}} {
		_, err := New("test", []Key{{Secret: "s"}}, WithHosts(hosts...))
		assert.ErrorContains(t, err, "WithHosts", "hosts %q", hosts)
	}
}
