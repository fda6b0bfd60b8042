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

// maxFailureBody bounds how much of a failure's body is read — by the
// transport, which peeks that much and hands the caller the whole body, and
// here, where a longer body is cut to it: vendors put what matters in the
// first few hundred bytes.
const maxFailureBody = 64 << 10

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
	oversized bool // the request alone exceeds a per-minute limit: no wait cures it
	// noAllowance: the limit is 0 (a free tier without the model), so no
	// wait brings it back.
	noAllowance bool
	// secondary: GitHub's secondary rate limit, which its x-ratelimit-reset
	// dates although the primary window has room.
	secondary bool
}

// readBody reads an error body as of now: a JSON body by its values,
// wherever they nest; any other body as text.
func readBody(body []byte, now time.Time) bodyEvidence {
	if len(body) > maxFailureBody {
		body = body[:maxFailureBody]
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
		billing:     containsAny(lower, billingPhrases[:]),
		auth:        containsAny(lower, authPhrases[:]),
		throttled:   containsAny(lower, throttlePhrases[:]),
		oversized:   containsAny(lower, oversizedPhrases[:]),
		quota:       containsAny(lower, quotaPhrases[:]),
		noAllowance: f.limitZero || statesLimitZero(lower),
		secondary:   strings.Contains(lower, secondaryLimitPhrase) || strings.Contains(lower, abuseLimitPhrase),
	}
	// OpenRouter forwards its rate-limit headers inside the body; they
	// outrank what the prose says, as headers do.
	var forwarded answerHeaders
	scanHeaders(f.headers, &forwarded)
	readHeaders(f.headers, &forwarded, now, &b.evidence)

	var own evidence
	if own.retryAfter, own.hasRetryAfter = parseWait(f.retryDelay, now); !own.hasRetryAfter {
		own.retryAfter, own.hasRetryAfter = proseDelay(lower, delayMarkers[:], now)
	}
	spent := limitEvidence{window: namedWindow(lower), spent: true}
	if spent.window == WindowDaily && own.hasRetryAfter && own.retryAfter <= longThrottle &&
		containsAny(lower, minutePhrases[:]) && !strings.Contains(lower, "perday") {
		// A per-minute and a per-day limit stated in prose, and a short
		// wait: the minute's limit is the one hit. (Gemini's quota ids
		// name only the quotas violated, so "PerDay" among them stands.)
		spent.window = WindowNone
	}
	stated := spent.window != WindowNone || b.quota
	if limit, used, ok := statedUsage(lower); ok {
		spent.used, spent.hasUsed, stated = used/limit, true, true
	}
	var usageReset bool
	spent.wait, spent.hasReset, usageReset = f.reset(lower, text, now)
	stated = stated || spent.hasReset
	if usageReset && spent.window == WindowNone {
		spent.window = windowOfWait(spent.wait)
	}
	if stated {
		own.add(spent)
	}
	b.fill(own)
	return b
}

// reset returns the wait until the limit a failure body names lifts, from
// the first of its fields and phrases that dates it; usage reports that it
// came from the ChatGPT backend's reset, which implies its window by its
// length.
func (f *bodyFields) reset(lower, text string, now time.Time) (wait time.Duration, ok, usage bool) {
	if wait, ok = parseWait(f.resetsIn, now); !ok {
		wait, ok = parseWait(f.resetsAt, now)
	}
	if ok {
		return wait, true, true
	}
	if wait, ok = parseWait(f.cooldown, now); ok {
		return wait, true, false
	}
	if wait, ok = proseResetDate(lower, text, now); ok {
		return wait, true, false
	}
	wait, ok = proseDelay(lower, resetMarkers[:], now)
	return wait, ok, false
}

// bodyFields are the values of a JSON error body the reading uses.
type bodyFields struct {
	text strings.Builder // every string value, one per line
	// retryDelay is Gemini's google.rpc.RetryInfo delay ("26s").
	retryDelay string
	// resetsAt and resetsIn are the ChatGPT backend's usage_limit_reached
	// reset, as epoch seconds and as a countdown.
	resetsAt, resetsIn string
	// cooldown is a router's countdown until a credential is back
	// (CLIProxyAPI's model_cooldown reset_seconds).
	cooldown string
	// headers are the rate-limit headers OpenRouter forwards in
	// error.metadata.headers.
	headers http.Header
	// limitZero: Google's ErrorInfo says the quota's limit is 0
	// (quota_limit_value "0").
	limitZero bool
}

// decode walks a JSON document, reporting false when data is not one (a
// text that merely starts with one, "4006: you have used up …", is not).
func (f *bodyFields) decode(data []byte, depth int) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil || len(bytes.TrimSpace(data[dec.InputOffset():])) > 0 {
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
			f.walk("", x, depth) // a field's value is never inside a list
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
	case "reset_seconds":
		f.cooldown = v
	case "quota_limit_value", "quotaValue": // Google's ErrorInfo and QuotaFailure
		f.limitZero = f.limitZero || v == "0"
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
