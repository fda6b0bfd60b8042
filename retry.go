package keypool

import (
	"context"
	"crypto/x509"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Retry holds a CheckRetry and a Backoff for a go-retryablehttp client whose
// HTTP client goes through a pool's transport. They know the sleep from the
// horizon: they sleep on Retry-After, retry-after-ms and reset headers, but
// never retry into a long window — a daily, 5-hour, weekly or monthly
// quota, or a reset beyond MaxWait — and then stop with a *ProviderError
// that says when the window lifts. On a *NoAvailableKeyError they wait until
// its RetryAt when that is within MaxWait, and stop otherwise.
//
//	retry := keypool.Retry{MinWait: time.Second, MaxWait: 30 * time.Second}
//	client := retryablehttp.NewClient()
//	client.HTTPClient.Transport = pool.Transport(nil)
//	client.CheckRetry, client.Backoff = retry.CheckRetry, retry.Backoff
//
// The waits are set here, once: Backoff uses MinWait and MaxWait, not the
// client's RetryWaitMin and RetryWaitMax, which it is given but ignores.
type Retry struct {
	// MinWait is the shortest sleep between two tries; zero is one second.
	MinWait time.Duration
	// MaxWait is the longest: no retry waits for a key or a window that
	// returns later. Zero is 30 seconds.
	MaxWait time.Duration
}

// waits returns MinWait and MaxWait with their defaults.
func (r Retry) waits() (lo, hi time.Duration) {
	lo, hi = r.MinWait, r.MaxWait
	if lo <= 0 {
		lo = time.Second
	}
	if hi <= 0 {
		hi = 30 * time.Second
	}
	return lo, max(lo, hi)
}

// CheckRetry reports whether a go-retryablehttp client should try a request
// again after resp or err, and with what error to stop.
func (r Retry) CheckRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		var na *NoAvailableKeyError
		if errors.As(err, &na) {
			return r.waitForKey(ctx, na, err)
		}
		return !permanent(err), nil
	}
	now := time.Now()
	var v verdict
	classifyAnswer(&v, resp, now)
	if v.quoted {
		// Words the request could have written: sent again, it gets
		// the same answer.
		return false, nil
	}
	_, maxWait := r.waits()
	switch v.kind {
	case KindRate:
		if v.reset.Window == WindowNone && !v.reset.ResetAt.After(now.Add(maxWait)) {
			return true, nil
		}
		return false, providerError(resp, v)
	case KindQuota:
		return false, providerError(resp, v)
	case KindTransient:
		return resp.StatusCode != http.StatusNotImplemented, nil
	}
	return false, nil
}

// waitForKey sleeps until a key is back, less the MinWait that Backoff adds,
// when that is within MaxWait.
func (r Retry) waitForKey(ctx context.Context, na *NoAvailableKeyError, err error) (bool, error) {
	minWait, maxWait := r.waits()
	wait := time.Until(na.RetryAt)
	if na.RetryAt.IsZero() || wait > maxWait {
		return false, err
	}
	if sleep := wait - minWait; sleep > 0 {
		t := time.NewTimer(sleep)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
	}
	return true, nil
}

// providerError describes a failure retrying cannot mend.
func providerError(resp *http.Response, v verdict) error {
	return &ProviderError{Kind: v.kind, Status: resp.StatusCode,
		RetryAfter: v.reset.RetryAfter, ResetAt: v.reset.ResetAt, Window: v.reset.Window}
}

// permanent reports whether a transport error will recur however often the
// request is sent: too many redirects, a bad scheme or header, an untrusted
// certificate. The http package gives some of these only as text.
func permanent(err error) bool {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return false
	}
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknown) || errors.As(err, &invalid) {
		return true
	}
	msg := ue.Error()
	for _, text := range []string{"stopped after", "unsupported protocol scheme", "invalid header", "certificate is not trusted"} {
		if strings.Contains(msg, text) {
			return true
		}
	}
	return false
}

// Backoff returns how long a go-retryablehttp client sleeps before trying a
// request again: the answer's Retry-After (or retry-after-ms), else the
// reset of its exhausted short window, else MinWait·2^attempt — never more
// than MaxWait. Without an answer (a transport error, or no key free, which
// CheckRetry has already waited for) it is MinWait. The client's own waits,
// passed as the first two arguments, are not used.
func (r Retry) Backoff(_, _ time.Duration, attempt int, resp *http.Response) time.Duration {
	lo, hi := r.waits()
	if resp == nil {
		return lo
	}
	now := time.Now()
	if d, ok := RetryAfterFromHeaders(resp.Header, now); ok {
		return between(d, lo, hi)
	}
	if reset := ParseRateLimitReset(resp.Header, now); reset.exhausted(now) {
		return between(reset.ResetAt.Sub(now), lo, hi)
	}
	d := lo
	for range attempt {
		if d >= hi {
			break
		}
		d *= 2
	}
	return between(d, lo, hi)
}

// between returns d, raised to lo and lowered to hi.
func between(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}
