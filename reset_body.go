package keypool

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// maxBodyRead bounds how much of a body is read; vendors put what matters in
// the first few hundred bytes.
const maxBodyRead = 64 << 10

// maxBodyNesting bounds how deep a JSON body is walked into a JSON document
// carried as a string (clients re-nest a vendor's body in their own message).
const maxBodyNesting = 2

// bodyEvidence is what an error body says: the limit and the wait it states,
// and the conditions it names. Bodies are read only on failures, never on
// the per-request path of a success.
type bodyEvidence struct {
	evidence
	billing   bool // a spent balance, credit or spend limit
	quota     bool // a spent allowance, whether or not the body names its window
	auth      bool // the key itself is refused
	throttled bool // the body speaks of a rate limit
	tooLarge  bool // the request alone exceeds a limit: no wait cures it
}

// readBody reads an error body as of now: a JSON body by its values,
// wherever they nest; any other body as text.
func readBody(body []byte, now time.Time) bodyEvidence {
	if len(body) > maxBodyRead {
		body = body[:maxBodyRead]
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return bodyEvidence{}
	}
	var f bodyFields
	if !f.decode(body, 0) {
		f.text.Write(body)
	}
	text := f.text.String()
	lower := asciiLower(text)

	b := bodyEvidence{
		billing:   containsAny(lower, billingPhrases[:]),
		auth:      containsAny(lower, authPhrases[:]),
		throttled: containsAny(lower, throttlePhrases[:]),
		tooLarge:  containsAny(lower, tooLargePhrases[:]),
		quota:     strings.Contains(lower, "usage_limit_reached"),
	}
	// OpenRouter forwards its rate-limit headers inside the body; they
	// outrank what the prose says, as headers do.
	readHeaders(f.headers, headerGroups(f.headers), now, &b.evidence)

	var own evidence
	if own.retryAfter, own.hasRetryAfter = parseWait(f.retryDelay, now); !own.hasRetryAfter {
		own.retryAfter, own.hasRetryAfter = proseDelay(lower, now)
	}
	spent := limitEvidence{window: namedWindow(lower), spent: true}
	stated := spent.window != WindowNone || b.quota
	if limit, used, ok := statedUsage(lower); ok {
		spent.used, spent.hasUsed, stated = used/limit, true, true
	}
	if spent.wait, spent.hasReset = parseWait(f.resetsAt, now); !spent.hasReset {
		spent.wait, spent.hasReset = parseWait(f.resetsIn, now)
	}
	if !spent.hasReset {
		spent.wait, spent.hasReset = proseResetDate(lower, text, now)
	}
	stated = stated || spent.hasReset
	if b.quota && spent.window == WindowNone && spent.hasReset {
		spent.window = windowOfWait(spent.wait)
	}
	if stated {
		own.add(spent)
	}
	b.fill(own)
	return b
}

// bodyFields are the values of a JSON error body the reading uses.
type bodyFields struct {
	text strings.Builder // every string value, one per line
	// retryDelay is Gemini's google.rpc.RetryInfo delay ("26s").
	retryDelay string
	// resetsAt and resetsIn are the ChatGPT backend's usage_limit_reached
	// reset, as epoch seconds and as a countdown.
	resetsAt, resetsIn string
	// headers are the rate-limit headers OpenRouter forwards in
	// error.metadata.headers.
	headers http.Header
}

// decode walks a JSON document, reporting false when data is not one.
func (f *bodyFields) decode(data []byte, depth int) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return false
	}
	f.walk("", v, depth)
	return true
}

// walk notes the values under key, in a deterministic order.
func (f *bodyFields) walk(key string, v any, depth int) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if k == "headers" {
				f.addHeaders(v[k])
				continue
			}
			f.walk(k, v[k], depth)
		}
	case []any:
		for _, x := range v {
			f.walk(key, x, depth)
		}
	case string:
		f.note(key, v)
		if strings.HasPrefix(v, "{") && depth < maxBodyNesting && f.decode([]byte(v), depth+1) {
			return
		}
		f.text.WriteString(v)
		f.text.WriteByte('\n')
	case json.Number:
		f.note(key, string(v))
	}
}

// note keeps the value of a field the reading uses.
func (f *bodyFields) note(key, v string) {
	switch key {
	case "retryDelay":
		f.retryDelay = v
	case "resets_at":
		f.resetsAt = v
	case "resets_in_seconds":
		f.resetsIn = v
	}
}

// addHeaders keeps the string members of a forwarded header object.
func (f *bodyFields) addHeaders(v any) {
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	if f.headers == nil {
		f.headers = make(http.Header, len(m))
	}
	for k, x := range m {
		switch x := x.(type) {
		case string:
			f.headers.Add(k, x)
		case json.Number:
			f.headers.Add(k, string(x))
		}
	}
}
