package keypool

import (
	"bytes"
	"net/http"
	"strings"
	"time"
)

// A key is benched — keypool's word for a cooldown — when an answer says it
// cannot serve for a while: Kind says what kind of outcome an answer is, and
// benchPolicy how long each kind benches a key. A quota answer that does not
// date its reset benches a key longer each time it recurs: the key's level
// for the model counts those answers since its last success.

// Kind is the kind of outcome an answer is, and so how long it benches a key.
type Kind int

// The kinds of outcome.
const (
	// KindNone is a success, a bad request, an unknown model, a context that
	// is too long, or a network error before any answer: no bench, no
	// failover.
	KindNone Kind = iota
	// KindRate is a throttle: the key is benched until the short window
	// resets.
	KindRate
	// KindQuota is a spent window or balance: a daily, 5-hour, weekly or
	// monthly quota, or a billing condition.
	KindQuota
	// KindAuth is a revoked or unauthorized key.
	KindAuth
	// KindTransient is the vendor's bad moment (5xx, 529), not the key's.
	KindTransient
)

var kindNames = [...]string{"none", "rate", "quota", "auth", "transient"}

// String returns the kind's name: "none", "rate", "quota", "auth" or
// "transient".
func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// benchPolicy holds how long each kind of failure benches a key.
type benchPolicy struct {
	rate      time.Duration   // a throttle that gives no date
	transient time.Duration   // a 5xx that gives no Retry-After
	auth      time.Duration   // a revoked or unauthorized key
	billing   time.Duration   // a spent balance or a 402
	levels    []time.Duration // quota answers without a date, by level
	min, max  time.Duration   // the clamp on every bench
}

func defaultBenchPolicy() benchPolicy {
	return benchPolicy{
		rate:      time.Minute,
		transient: time.Minute,
		auth:      12 * time.Hour,
		billing:   12 * time.Hour,
		levels:    []time.Duration{2 * time.Minute, 10 * time.Minute, time.Hour, 12 * time.Hour},
		min:       time.Second,
		max:       12 * time.Hour,
	}
}

// benchFor returns how long verdict v benches a key at now, given the level
// of the key for the model: the number of quota answers without a date since
// its last success. climb reports that the bench came from the quota levels,
// so the level goes up by one. A zero duration means no bench.
func (b benchPolicy) benchFor(v verdict, level int, now time.Time) (d time.Duration, climb bool) {
	if v.quoted {
		// Confirmed by another key that served the same request, words
		// the request could have written still date nothing: the shortest
		// bench, after which the key returns carefully — one request a
		// minute while it keeps failing.
		return max(b.rate, b.min), false
	}
	dated := !v.reset.ResetAt.IsZero() // a reset at or before now asks for the shortest bench
	switch v.kind {
	case KindRate:
		d = b.rate
		if dated {
			d = v.reset.ResetAt.Sub(now)
		}
	case KindQuota:
		switch {
		case dated:
			d = v.reset.ResetAt.Sub(now)
		case v.billing:
			d = b.billing
		default:
			d, climb = b.levels[min(max(level, 0), len(b.levels)-1)], true
		}
	case KindAuth:
		d = b.auth
	case KindTransient:
		d = b.transient
		if v.reset.HasRetryAfter && v.reset.RetryAfter > 0 {
			d = v.reset.RetryAfter
		}
	default:
		return 0, false
	}
	return min(max(d, b.min), b.max), climb
}

// What an answer may bench is the package doc's rule of that name; quote,
// mayHaveWritten, wholeKey and ofAccount are its code, and the vendor's own words are the
// signs the reading gathers apart from prose (bodyEvidence.coded and the
// headers' evidence).

// quote marks verdict v of an answer with status, its body read into b,
// quoted when it rests on words the request could have written: a 400 or
// 403 — or a 5xx that speaks of money — whose kind no field or header in
// vendor states, or a 402 that speaks of the request's own size ("fewer
// max_tokens"). v.echo is what of the prose made it so: a request that
// holds none of those words cannot have written them (see mayHaveWritten),
// and its answer is the key's after all. A kind the status alone gives (a
// bare 403) or a 402 of the request's size stays quoted whatever the
// request holds.
func quote(status int, v *verdict, b *bodyEvidence, vendor signs) {
	switch {
	case v.kind == KindNone || v.oversized:
		return
	case status == http.StatusPaymentRequired && b.sized:
		v.quoted = true
		return
	case status == http.StatusBadRequest, status == http.StatusForbidden:
	case status >= 500 && v.billing: // a server error that speaks of money
	default:
		return
	}
	need, said := signLimit, b.throttled || b.quota || b.hasSpent || b.hasRetryAfter || b.noAllowance
	switch {
	case v.billing:
		need, said = signBilling, b.billing
	case v.kind == KindAuth:
		need, said = signAuth, b.auth
	}
	if vendor&need != 0 {
		return
	}
	v.quoted = true
	if said {
		v.echo = need
	}
}

// mayHaveWritten reports whether a request could have written the words
// of a quoted answer's conditions echo: its path, its query or its body
// holds a phrase of theirs or a JSON escape that may hide one — or the pool
// does not hold its body whole (whole false) to tell.
func mayHaveWritten(echo signs, req *http.Request, body []byte, whole bool) bool {
	if !whole || echo == 0 {
		return true
	}
	if bytes.Contains(body, []byte(`\u`)) {
		return true
	}
	for _, s := range [...]string{string(body), req.URL.Path, req.URL.RawQuery} {
		if s = asciiLower(s); echo&signBilling != 0 && containsAny(s, billingPhrases[:]) ||
			echo&signAuth != 0 && containsAny(s, authPhrases[:]) ||
			echo&signLimit != 0 && (containsAny(s, quotaPhrases[:]) || containsAny(s, throttlePhrases[:]) || containsAny(s, limitWords[:])) {
			return true
		}
	}
	return req.URL.RawQuery != "" && strings.Contains(req.URL.RawQuery, "%")
}

// limitWords are the words any prose that names a window or a wait holds
// one of; a request that holds none cannot have written such prose.
var limitWords = [...]string{"limit", "quota", "per ", "daily", "weekly", "monthly", "hour", "day", "week", "month", "minute", "second", "retry", "reset", "wait", "try again", "available"}

// wholeKey reports whether verdict v benches the whole key rather than the
// key for one model: a key that is revoked or out of money, in the vendor's
// own words, is out for every model.
func (v verdict) wholeKey() bool {
	return (v.kind == KindAuth || v.billing) && !v.quoted
}

// ofAccount reports whether verdict v benches every key of the key's
// account: a throttle or a spent quota, in the vendor's own words, is the
// account's, whose keys share the windows that are spent.
func (v verdict) ofAccount() bool {
	return (v.kind == KindRate || v.kind == KindQuota) && !v.quoted
}

// MarshalText returns the kind's name, so that JSON shows "rate", not 1.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }
