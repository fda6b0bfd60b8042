package keypool

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// checkReset fails t when a reading breaks the promises every reading keeps:
// no negative wait, none beyond maxHorizon, no horizon before now or beyond
// now+maxHorizon, no NaN or infinite or negative utilization.
func checkReset(t *testing.T, call string, r Reset, now time.Time) {
	t.Helper()
	if r.RetryAfter < 0 || r.RetryAfter > maxHorizon {
		t.Errorf("%s RetryAfter = %v, want within [0, %v]", call, r.RetryAfter, maxHorizon)
	}
	if !r.HasRetryAfter && r.RetryAfter != 0 {
		t.Errorf("%s RetryAfter = %v without HasRetryAfter", call, r.RetryAfter)
	}
	if !r.ResetAt.IsZero() && (r.ResetAt.Before(now) || r.ResetAt.After(now.Add(maxHorizon))) {
		t.Errorf("%s ResetAt = %v, want within [%v, %v]", call, r.ResetAt, now, now.Add(maxHorizon))
	}
	if u := r.Utilization; u != u || u < 0 || u > 1e300 {
		t.Errorf("%s Utilization = %v, want a finite fraction", call, u)
	}
	switch r.Window {
	case WindowNone, Window5h, WindowDaily, WindowWeekly, WindowMonthly:
	default:
		t.Errorf("%s Window = %q, want a known window", call, r.Window)
	}
}

// headerLines reads "Name: value" lines into a canonical header map.
func headerLines(s string) http.Header {
	h := http.Header{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":"); ok {
			h.Add(k, strings.TrimSpace(v))
		}
	}
	return h
}

// rawHeaderLines reads "Name: value" lines into a header map as a map
// built by hand may hold them: keys as they are, values untrimmed but for
// the space after the colon, and a line without a colon a key with no
// values.
func rawHeaderLines(s string) http.Header {
	h := http.Header{}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !ok {
			h[k] = append(h[k], []string{}...)
			continue
		}
		h[k] = append(h[k], strings.TrimPrefix(v, " "))
	}
	return h
}

// asLines writes a header map as "Name: value" lines.
func asLines(h map[string][]string) string {
	var b strings.Builder
	for k, vs := range h {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\n")
		}
	}
	return b.String()
}

// fuzzNow maps any fuzzed number to an instant between 1970 and 2242.
func fuzzNow(sec int64) time.Time {
	if sec < 0 {
		sec = -(sec + 1)
	}
	return time.Unix(sec%(1<<33), 0).UTC()
}

func FuzzParseWait(f *testing.F) {
	for _, s := range []string{"7", "1.5", "6m0s", "2m59.56s", "2025-03-04T10:12:12Z", "Tue, 04 Mar 2025 10:11:19 GMT",
		"1741083132", "1741083132000", "-1", "NaN", "1e300", "", "2025-04-30T13:32:11Z", "2024-02-29T23:59:59Z",
		"0000-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "2025-03-04T10:12:12.5Z", "1741083132.9999999999", "6ms", " 30ms"} {
		f.Add(s, now.Unix())
	}
	f.Fuzz(func(t *testing.T, v string, sec int64) {
		now := fuzzNow(sec)
		d, ok := parseWait(v, now)
		if d < 0 || d > maxHorizon || (!ok && d != 0) {
			t.Errorf("parseWait(%q) = %v, %v, want a wait within [0, %v]", v, d, ok, maxHorizon)
		}
		if want, wantOK := refParseWait(v, now); d != want || ok != wantOK {
			t.Errorf("parseWait(%q) at %v = %v, %v, want %v, %v as refParseWait reads it", v, now, d, ok, want, wantOK)
		}
	})
}

func FuzzRetryAfterFromHeaders(f *testing.F) {
	for _, a := range loadRecordedAnswers(f) {
		f.Add(asLines(a.Headers), a.Now.Unix())
	}
	f.Fuzz(func(t *testing.T, lines string, sec int64) {
		now := fuzzNow(sec)
		d, ok := RetryAfterFromHeaders(headerLines(lines), now)
		if d < 0 || d > maxHorizon || (!ok && d != 0) {
			t.Errorf("RetryAfterFromHeaders(%q) = %v, %v, want a wait within [0, %v]", lines, d, ok, maxHorizon)
		}
	})
}

func FuzzParseRateLimitReset(f *testing.F) {
	for _, a := range loadRecordedAnswers(f) {
		f.Add(asLines(a.Headers), a.Now.Unix())
	}
	f.Fuzz(func(t *testing.T, lines string, sec int64) {
		now := fuzzNow(sec)
		checkReset(t, "ParseRateLimitReset("+strconv.Quote(lines)+")", ParseRateLimitReset(headerLines(lines), now), now)
	})
}

func FuzzParseUsageLimitBody(f *testing.F) {
	for _, a := range loadRecordedAnswers(f) {
		f.Add([]byte(a.Body), a.Now.Unix())
	}
	f.Fuzz(func(t *testing.T, body []byte, sec int64) {
		now := fuzzNow(sec)
		checkReset(t, "ParseUsageLimitBody("+strconv.Quote(string(body))+")", ParseUsageLimitBody(body, now), now)
	})
}

// FuzzReadHeaders holds scanHeaders and readHeaders to refReadHeaders, the
// reading before them, on any header map, canonical or not, and checks that
// an answer scanHeaders finds empty says nothing to refReadHeaders either.
func FuzzReadHeaders(f *testing.F) {
	for _, a := range loadRecordedAnswers(f) {
		f.Add(asLines(a.Headers), a.Now.Unix())
	}
	for _, h := range benchHeaders {
		f.Add(asLines(h), now.Unix())
	}
	f.Add(asLines(newCannedBase().header), now.Unix())
	// An empty remaining count is as absent: the reset dates the limit alone.
	f.Add("X-Ratelimit-Remaining-Requests:\nX-Ratelimit-Reset-Requests: 6ms\nX-Ratelimit-Limit-Requests\n", now.Unix())
	f.Fuzz(func(t *testing.T, lines string, sec int64) {
		now := fuzzNow(sec)
		for _, h := range []http.Header{headerLines(lines), rawHeaderLines(lines)} {
			var a answerHeaders
			scanHeaders(h, &a)
			var got evidence
			readHeaders(h, &a, now, &got)
			want, _ := refReadHeaders(h, now)
			if got != want {
				t.Errorf("readHeaders(%v) at %v = %+v, want %+v as refReadHeaders reads it", h, now, got, want)
			}
			if a.empty() && want != (evidence{}) {
				t.Errorf("scanHeaders(%v) found nothing to read, but refReadHeaders reads %+v", h, want)
			}
		}
	})
}

// refClassify is classify with the reading of headers before scanHeaders
// matched keys through headerSlots (refReadHeaders).
func refClassify(status int, h http.Header, body []byte, now time.Time) verdict {
	e, scanned := refReadHeaders(h, now)
	if !scanned && status < 400 {
		return verdict{}
	}
	var v verdict
	judge(&v, status, body, &e, now)
	v.stated = e.stated
	return v
}

func FuzzClassify(f *testing.F) {
	for _, a := range loadRecordedAnswers(f) {
		f.Add(a.Status, asLines(a.Headers), []byte(a.Body), a.Now.Unix())
	}
	f.Fuzz(func(t *testing.T, status int, lines string, body []byte, sec int64) {
		now := fuzzNow(sec)
		v := classify(status, headerLines(lines), body, now)
		call := "Classify(" + strconv.Itoa(status) + ", " + strconv.Quote(lines) + ", " + strconv.Quote(string(body)) + ")"
		checkReset(t, call, v.reset, now)
		if v.kind < KindNone || v.kind > KindTransient {
			t.Errorf("%s kind = %d, want a known kind", call, v.kind)
		}
		if v.billing && v.kind != KindQuota {
			t.Errorf("%s billing with kind %v, want quota", call, v.kind)
		}
		if v.oversized && v.kind != KindRate {
			t.Errorf("%s oversized with kind %v, want rate", call, v.kind)
		}
		if want := refClassify(status, headerLines(lines), body, now); v != want {
			t.Errorf("%s = %+v, want %+v as refClassify reads it", call, v, want)
		}
	})
}
