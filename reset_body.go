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
	// overloaded: the body speaks of the vendor's overload, not of a
	// limit of the key's.
	overloaded bool
	// sized: the body says the request is too large for what the key has
	// left (OpenRouter's 402 "requires more credits, or fewer max_tokens").
	sized bool
	// noAllowance: the limit is 0 (a free tier without the model), so no
	// wait brings it back.
	noAllowance bool
	// secondary: GitHub's secondary rate limit, which its x-ratelimit-reset
	// dates although the primary window has room.
	secondary bool
	// coded is what the vendor's own fields say — its codes and the
	// rate-limit headers it forwards — apart from what its prose says,
	// which may quote the request (see quoted).
	coded signs
}

// signs are the conditions an answer states in the vendor's own words.
type signs uint8

const (
	signBilling signs = 1 << iota // a spent balance, credit or spend limit
	signAuth                      // the key itself is refused
	signLimit                     // a rate limit or a spent window
)

// signsOf returns the conditions the lower-cased codes name.
func signsOf(codes string) signs {
	var s signs
	if containsAny(codes, billingPhrases[:]) {
		s |= signBilling
	}
	if containsAny(codes, authPhrases[:]) {
		s |= signAuth
	}
	if containsAny(codes, quotaPhrases[:]) || containsAny(codes, throttlePhrases[:]) {
		s |= signLimit
	}
	return s
}

// signs returns what evidence read from headers states: a spent window or
// a wait asked for is a limit, spent credits are billing.
func (e *evidence) signs() signs {
	var s signs
	if e.hasSpent || e.hasRetryAfter {
		s |= signLimit
	}
	if e.creditsSpent {
		s |= signBilling
	}
	return s
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
		coded:       signsOf(asciiLower(f.codes.String())),
		billing:     containsAny(lower, billingPhrases[:]),
		auth:        containsAny(lower, authPhrases[:]),
		throttled:   containsAny(lower, throttlePhrases[:]),
		oversized:   containsAny(lower, oversizedPhrases[:]),
		overloaded:  containsAny(lower, overloadPhrases[:]),
		sized:       containsAny(lower, sizedPhrases[:]),
		quota:       containsAny(lower, quotaPhrases[:]),
		noAllowance: f.limitZero || statesLimitZero(lower),
		secondary:   strings.Contains(lower, secondaryLimitPhrase) || strings.Contains(lower, abuseLimitPhrase),
	}
	// OpenRouter forwards its rate-limit headers inside the body; they
	// outrank what the prose says, as headers do.
	var forwarded answerHeaders
	scanHeaders(f.headers, &forwarded)
	readHeaders(f.headers, &forwarded, now, &b.evidence)
	b.coded |= b.evidence.signs()

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
	if w, used, ok := periodLimits(lower); ok {
		spent.window, spent.used, spent.hasUsed, stated = w, used, true, true
	}
	var usageReset bool
	spent.wait, spent.hasReset, usageReset = f.reset(lower, text, now)
	stated = stated || spent.hasReset
	if usageReset && spent.window == WindowNone {
		spent.window = windowOfWait(spent.wait)
	}
	if stated {
		// A 5-hour or weekly window in prose is a subscription's plan
		// window (Claude's, Zhipu's and Ollama's coding plans).
		spent.plan = spent.window == Window5h || spent.window == WindowWeekly
		own.add(&spent)
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
	// codes are the values of the vendor's own identifier fields (see
	// vendorCode), one per line: what the body says in words the request
	// cannot have put there.
	codes strings.Builder
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
	f.walk("", v, depth, depth == 0)
	return true
}

// walk notes the values under key, in a deterministic order. own says that
// v lies where the vendor's own fields are: the body's top level, its
// error object, that object's metadata, and the entries of its details or
// errors — not in a document a string carries, nor under any other field,
// where a vendor may echo what the request sent.
func (f *bodyFields) walk(key string, v any, depth int, own bool) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if k == "headers" {
				if own {
					f.addHeaders(v[k])
				}
				continue
			}
			f.walk(k, v[k], depth, own && ownPlace(k, v[k]))
		}
	case []any:
		for _, x := range v {
			f.walk("", x, depth, own) // a field's value is never inside a list
		}
	case string:
		f.note(key, v)
		if own && vendorCode(key, v) {
			f.codes.WriteString(v)
			f.codes.WriteByte('\n')
		}
		if strings.HasPrefix(v, "{") && depth < maxBodyNesting && f.decode([]byte(v), depth+1) {
			return
		}
		f.text.WriteString(v)
		f.text.WriteByte('\n')
	case json.Number:
		f.note(key, string(v))
	}
}

// ownPlace reports whether the value v of field k, itself in the vendor's
// own place, is too: a value, or an error object, its metadata, its
// details.
func ownPlace(k string, v any) bool {
	switch v.(type) {
	case map[string]any, []any:
	default:
		return true
	}
	switch k {
	case "error", "metadata", "details", "errors":
		return true
	}
	return false
}

// maxCode is the longest value read as a vendor's code.
const maxCode = 64

// vendorCode reports whether field key's value v is a code the vendor
// writes — OpenAI's error.code and error.type ("insufficient_quota"),
// Google's status and ErrorInfo reason ("API_KEY_INVALID"): a field of
// that name whose value is one identifier, no prose.
func vendorCode(key, v string) bool {
	switch key {
	case "code", "type", "status", "reason", "error_code", "error_type":
	default:
		return false
	}
	if len(v) == 0 || len(v) > maxCode {
		return false
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}

// note keeps the value of a field the reading uses.
func (f *bodyFields) note(key, v string) {
	switch key {
	case "retryDelay", "retry_after": // Gemini's RetryInfo; Replicate's 429 body
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
