package keypool

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Keys go only to the vendor: to the hosts of WithHosts, or else to the host
// a request was first sent to. http.Client calls a RoundTripper again for
// every hop of a redirect, so a transport that put its key on every request
// would hand the key to whatever host a redirect named — net/http strips
// Authorization on such a hop, but not the header another vendor reads, nor
// a key in the URL.

// hostKey returns u's host as hosts are compared: lower case, with the
// scheme's default port when none is given.
func hostKey(u *url.URL) string {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return net.JoinHostPort(host, port)
}

// parseHost returns the host key of an entry of WithHosts: a host name
// with or without a port ("api.openai.com", "localhost:8080"); without one
// it stands for both default ports.
func parseHost(h string) ([]string, error) {
	if h == "" || strings.ContainsAny(h, "/?#@ ") {
		return nil, fmt.Errorf("%q is not a host name", h)
	}
	if _, _, err := net.SplitHostPort(h); err == nil {
		return []string{hostKey(&url.URL{Host: h})}, nil
	}
	return []string{hostKey(&url.URL{Scheme: "http", Host: h}), hostKey(&url.URL{Scheme: "https", Host: h})}, nil
}

// maxRedirects bounds the walk back along a redirect chain.
const maxRedirects = 64

// firstRequest returns the request a chain of redirects began with: req
// itself when it is no redirect.
func firstRequest(req *http.Request) *http.Request {
	for range maxRedirects {
		if req.Response == nil || req.Response.Request == nil {
			break
		}
		req = req.Response.Request
	}
	return req
}

// keyless reports whether req must go without a key — a redirect to a host
// keys do not go to — or returns an error for a request the pool must not
// send at all: one sent first to a host outside WithHosts.
func (p *Pool) keyless(req *http.Request) (bool, error) {
	if req.URL == nil {
		return false, nil // net/http refuses it
	}
	if len(p.cfg.hosts) > 0 {
		if p.cfg.hosts[hostKey(req.URL)] {
			return false, nil
		}
		if req.Response != nil {
			return true, nil
		}
		return false, fmt.Errorf("keypool: %s: %s is not a host of the pool (WithHosts): no key goes there", p.provider, req.URL.Host)
	}
	if req.Response == nil {
		return false, nil
	}
	first := firstRequest(req)
	return first.URL == nil || hostKey(first.URL) != hostKey(req.URL), nil
}

// sendKeyless sends a redirected request on to a host keys do not go to, as
// net/http would: with no key of the pool, and without the header or
// parameter keys go in. It counts in no window.
func (t *transport) sendKeyless(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	t.pool.cfg.auth.strip(out)
	resp, err := t.base.RoundTrip(out)
	if resp != nil {
		resp.Request = req
	}
	return resp, err
}
