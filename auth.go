package keypool

import (
	"context"
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

// outgoing returns the request one attempt sends: req under ctx, with the
// key's value put on it in place of any the request had for the same header
// or parameter, in any spelling. req is left as it was. When ctx is req's
// own context and into is not nil, the copy is made in into, which the
// caller allocated with other things, rather than in a request of its own.
//
// It copies only what it changes, where Request.Clone copies every field
// the request points to: the header, and the URL for a key in the query.
// The rest — the trailer, the form, the transfer encoding — is the
// caller's, which no RoundTripper may change.
func (a auth) outgoing(ctx context.Context, req *http.Request, value []string, into *http.Request) *http.Request {
	var out *http.Request
	if into != nil && ctx == req.Context() {
		*into = *req // as WithContext copies it, the context the same
		out = into
	} else {
		out = req.WithContext(ctx)
	}
	if a.style == authQuery {
		out.Header = cloneHeader(req.Header, "", nil)
		if req.URL != nil {
			u := *req.URL
			u.RawQuery = withQuery(u.RawQuery, a.name, value[0])
			out.URL = &u
		}
		return out
	}
	out.Header = cloneHeader(req.Header, a.name, value)
	return out
}

// cloneHeader returns a copy of h without any spelling of name, and with
// name set to value when name is not "". As Header.Clone does, it copies
// the values into one array, each name's cut to its length: whatever sends
// the request may write to them or append, and the caller's header, or
// the key's value that later requests share, never sees it.
func cloneHeader(h http.Header, name string, value []string) http.Header {
	n := len(value)
	for _, v := range h {
		n += len(v)
	}
	values := make([]string, n)
	out := make(http.Header, len(h)+1)
	for k, v := range h {
		if name != "" && len(k) == len(name) && strings.EqualFold(k, name) {
			continue
		}
		out[k], values = cut(values, v)
	}
	if name != "" {
		out[name], _ = cut(values, value)
	}
	return out
}

// cut copies v into the start of values and returns that copy, its
// capacity its length, and the rest of values.
func cut(values, v []string) (copied, rest []string) {
	n := copy(values, v)
	return values[:n:n], values[n:]
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
