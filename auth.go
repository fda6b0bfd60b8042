package keypool

import (
	"net/http"
	"net/url"
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
	// The slice is shared by every request of the key; the http package
	// only reads it.
	r.Header[a.name] = value
}

// withQuery returns the query raw without any name parameter and with pair
// ("name=value") added at the end.
func withQuery(raw, name, pair string) string {
	if raw == "" {
		return pair
	}
	var b strings.Builder
	for part := range strings.SplitSeq(raw, "&") {
		if key, _, _ := strings.Cut(part, "="); key == "" || unescape(key) == name {
			continue
		}
		b.WriteString(part)
		b.WriteByte('&')
	}
	b.WriteString(pair)
	return b.String()
}

func unescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}
