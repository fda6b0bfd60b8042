package keypool

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// auth is how a key is put on a request.
type auth struct {
	style  authStyle
	name   string // the canonical header name, or the query parameter
	prefix string // before the secret in a header value; "param=" for a query
}

type authStyle int

const (
	authHeader authStyle = iota
	authQuery
)

// value returns what apply puts on a request for secret, built once per key.
func (a auth) value(secret string) []string {
	if a.style == authQuery {
		return []string{a.prefix + url.QueryEscape(secret)}
	}
	return []string{a.prefix + secret}
}

// apply puts a key's value on r, a clone the caller owns, replacing any value
// the request already had for the same header or parameter.
func (a auth) apply(r *http.Request, value []string) {
	if a.style == authQuery {
		r.URL.RawQuery = withQuery(r.URL.RawQuery, a.name, value[0])
		return
	}
	if r.Header == nil {
		r.Header = make(http.Header, 1)
	}
	// A header set under a name that is not canonical (r.Header["x-api-key"])
	// is sent too: remove every spelling, so the key is replaced, never
	// doubled.
	for name := range r.Header {
		if len(name) == len(a.name) && name != a.name && strings.EqualFold(name, a.name) {
			delete(r.Header, name)
		}
	}
	// The slice is shared by every request of the key; the http package
	// only reads it.
	r.Header[a.name] = value
}

// strip removes from r, a clone the caller owns, the header or parameter a
// key goes in, in every spelling.
func (a auth) strip(r *http.Request) {
	if a.style == authQuery {
		if r.URL != nil && r.URL.RawQuery != "" {
			u := *r.URL
			u.RawQuery = withoutQuery(u.RawQuery, a.name)
			r.URL = &u
		}
		return
	}
	for name := range r.Header {
		if strings.EqualFold(name, a.name) {
			delete(r.Header, name)
		}
	}
}

// withoutQuery returns the query raw without any name parameter.
func withoutQuery(raw, name string) string {
	var b strings.Builder
	for part := range strings.SplitSeq(raw, "&") {
		if key, _, _ := strings.Cut(part, "="); key == "" || unescape(key) == name {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(part)
	}
	return b.String()
}

// withQuery returns the query raw without any name parameter and with pair
// ("name=value") added at the end.
func withQuery(raw, name, pair string) string {
	if raw == "" {
		return pair
	}
	if rest := withoutQuery(raw, name); rest != "" {
		return rest + "&" + pair
	}
	return pair
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// refused reports whether err is net/http refusing to send the key's
// header value: a key the transport cannot put on any request. The http
// package says so only in its error text.
func (a auth) refused(err error) bool {
	return a.style == authHeader && strings.Contains(err.Error(), "invalid header field value for "+strconv.Quote(a.name))
}

// unechoed removes a key put in a URL from an answer's headers that echo it:
// a Location or Content-Location loses the parameter (a redirect to the same
// host gets the key again from the pool; one to another host must not), any
// other header the secret itself. Only keys put in the query are echoed so.
func (a auth) unechoed(h http.Header, secret string) {
	if a.style != authQuery || len(h) == 0 {
		return
	}
	escaped := url.QueryEscape(secret)
	for name, vs := range h {
		for i, v := range vs {
			if !strings.Contains(v, secret) && !strings.Contains(v, escaped) {
				continue
			}
			if u, err := url.Parse(v); err == nil && (name == "Location" || name == "Content-Location") {
				u.RawQuery = withoutQuery(u.RawQuery, a.name)
				vs[i] = u.String()
				continue
			}
			vs[i] = strings.ReplaceAll(strings.ReplaceAll(v, secret, "[redacted]"), escaped, "[redacted]")
		}
	}
}
