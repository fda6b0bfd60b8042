package main

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// redactor finds the secrets of the proxy's upstream keys in text the proxy
// passes to its clients — an upstream's headers, the body of a failure it
// forwards, the proxy's own error messages — and puts the key's ID in their
// place, "[redacted:ID]". It finds each secret whole, in the forms a URL or
// a JSON string escapes it to, and masked as vendors echo keys: a prefix
// and a suffix of the secret around asterisks or dots ("sk-abc***wxyz").
//
// A redactor is built once and read by every request; it is safe for
// concurrent use.
type redactor struct {
	needles []needle
	// anchors holds a bit for each hashed anchor — a needle's first
	// anchorLen bytes — so that a scan looks a position up only when the
	// bit is set, which in text without secrets is seldom.
	anchors  [anchorBits / 64]uint64
	byAnchor map[uint32][]int // needles by anchor, longest first
	short    []int            // needles shorter than anchorLen, longest first
	keys     []maskKey        // the secrets, for masked echoes
}

// needle is a text to find and what goes in its place.
type needle struct{ text, repl string }

// maskKey is a secret and what goes in place of a masked echo of it.
type maskKey struct{ secret, repl string }

const (
	anchorLen  = 4
	anchorBits = 1 << 16
	// minMaskShown is how many characters of a secret a masked echo must
	// show, around its mask, to be recognised.
	minMaskShown = 4
)

// secretKey is a secret and the ID of its key.
type secretKey struct{ secret, id string }

// newRedactor returns a redactor of the secrets keys.
func newRedactor(keys []secretKey) *redactor {
	r := &redactor{byAnchor: map[uint32][]int{}}
	seen := map[string]bool{}
	for _, k := range keys {
		if k.secret == "" {
			continue
		}
		repl := "[redacted:" + k.id + "]"
		r.keys = append(r.keys, maskKey{k.secret, repl})
		for _, form := range secretForms(k.secret) {
			if !seen[form] {
				seen[form] = true
				r.needles = append(r.needles, needle{form, repl})
			}
		}
	}
	longestFirst := func(a, b int) int { return len(r.needles[b].text) - len(r.needles[a].text) }
	for i, n := range r.needles {
		if len(n.text) < anchorLen {
			r.short = append(r.short, i)
			continue
		}
		a := anchorOf(n.text)
		r.anchors[anchorHash(a)/64] |= 1 << (anchorHash(a) % 64)
		r.byAnchor[a] = append(r.byAnchor[a], i)
	}
	for _, list := range r.byAnchor {
		slices.SortFunc(list, longestFirst)
	}
	slices.SortFunc(r.short, longestFirst)
	return r
}

// secretForms returns a secret as it may appear in text: itself, escaped
// for a URL's query or path (with upper- or lower-case hex), and escaped
// for a JSON string.
func secretForms(secret string) []string {
	forms := []string{secret, url.QueryEscape(secret), url.PathEscape(secret)}
	if j, err := json.Marshal(secret); err == nil {
		forms = append(forms, string(j[1:len(j)-1]))
	}
	for _, f := range forms[1:3] {
		if strings.Contains(f, "%") {
			forms = append(forms, lowerHex(f))
		}
	}
	return forms
}

// lowerHex returns a percent-encoded text with its hex digits in lower
// case.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = toLower(b[i+1]), toLower(b[i+2])
		}
	}
	return string(b)
}

func toLower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func anchorOf(s string) uint32 {
	return uint32(s[0])<<24 | uint32(s[1])<<16 | uint32(s[2])<<8 | uint32(s[3])
}

func anchorHash(a uint32) uint32 { return (a * 2654435761) >> 16 }

// String returns s with every secret, whole or masked, replaced.
func (r *redactor) String(s string) string {
	return r.unmask(r.shortNeedles(r.whole(s))) // longest first: a short secret may lie inside a long one
}

// whole replaces the needles of at least anchorLen bytes.
func (r *redactor) whole(s string) string {
	if len(r.byAnchor) == 0 {
		return s
	}
	var b strings.Builder
	done := 0 // s[:done] is in b, when b is in use
	var w uint32
	for i := 0; i < len(s); i++ {
		w = w<<8 | uint32(s[i])
		start := i - anchorLen + 1
		if start < done || r.anchors[anchorHash(w)/64]&(1<<(anchorHash(w)%64)) == 0 {
			continue
		}
		for _, n := range r.byAnchor[w] {
			nd := r.needles[n]
			if strings.HasPrefix(s[start:], nd.text) {
				b.WriteString(s[done:start])
				b.WriteString(nd.repl)
				done = start + len(nd.text)
				break
			}
		}
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// shortNeedles replaces the needles shorter than anchorLen, which real
// keys never are.
func (r *redactor) shortNeedles(s string) string {
	for _, n := range r.short {
		nd := r.needles[n]
		if strings.Contains(s, nd.text) {
			s = strings.ReplaceAll(s, nd.text, nd.repl)
		}
	}
	return s
}

// unmask replaces the masked echoes of secrets: the characters of a key
// around a run of three or more asterisks or dots, or an ellipsis, that
// start and end like one of the secrets and show at least minMaskShown of
// its characters. An echo that fits several secrets becomes "[redacted]".
func (r *redactor) unmask(s string) string {
	if len(r.keys) == 0 || !strings.Contains(s, "**") && !strings.Contains(s, "..") && !strings.Contains(s, "…") {
		return s
	}
	var b strings.Builder
	done := 0
	for i := 0; i < len(s); {
		end := maskEnd(s, i)
		if end == i {
			i++
			continue
		}
		from, to := i, end
		for from > done && isKeyByte(s[from-1]) {
			from--
		}
		for to < len(s) && isKeyByte(s[to]) {
			to++
		}
		if repl, ok := r.masked(s[from:i], s[end:to]); ok {
			b.WriteString(s[done:from])
			b.WriteString(repl)
			done = to
		}
		i = max(end, to)
	}
	if done == 0 {
		return s
	}
	b.WriteString(s[done:])
	return b.String()
}

// maskEnd returns where a mask that starts at i ends, or i when none
// starts there: three or more of '*' and '.', or any run holding an
// ellipsis.
func maskEnd(s string, i int) int {
	j, marks, ellipsis := i, 0, false
	for j < len(s) {
		switch {
		case s[j] == '*' || s[j] == '.':
			marks++
			j++
		case strings.HasPrefix(s[j:], "…"):
			ellipsis = true
			j += len("…")
		default:
			if marks >= 3 || ellipsis {
				return j
			}
			return i
		}
	}
	if marks >= 3 || ellipsis {
		return j
	}
	return i
}

// masked returns what replaces a masked echo showing prefix and suffix of a
// secret.
func (r *redactor) masked(prefix, suffix string) (string, bool) {
	if len(prefix)+len(suffix) < minMaskShown {
		return "", false
	}
	repl, found := "", 0
	for _, k := range r.keys {
		if len(prefix)+len(suffix) < len(k.secret) && strings.HasPrefix(k.secret, prefix) && strings.HasSuffix(k.secret, suffix) {
			repl = k.repl
			found++
		}
	}
	switch found {
	case 0:
		return "", false
	case 1:
		return repl, true
	}
	return "[redacted]", true
}

// isKeyByte reports whether c may be part of a key as vendors issue them.
func isKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// header redacts every name and value of h in place, and drops the cookies
// an upstream sets: a cookie of the upstream's is nothing the proxy's
// clients should hold.
func (r *redactor) header(h http.Header) {
	delete(h, "Set-Cookie")
	delete(h, "Set-Cookie2")
	for name, values := range h {
		for i, v := range values {
			values[i] = r.String(v)
		}
		if clean := r.String(name); clean != name {
			delete(h, name)
			h[clean] = append(h[clean], values...)
		}
	}
}
