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
//	client.RetryWaitMin, client.RetryWaitMax = retry.MinWait, retry.MaxWait
//	client.CheckRetry, client.Backoff = retry.CheckRetry, retry.Backoff
//
// MinWait and MaxWait must be the client's RetryWaitMin and RetryWaitMax.
type Retry struct {
	MinWait time.Duration
	MaxWait time.Duration
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
	var head []byte
	if resp.StatusCode >= 400 {
		head, resp.Body = peek(resp.Body, maxFailureBody)
	}
	now := time.Now()
	v := classify(resp.StatusCode, resp.Header, head, now)
	switch v.kind {
	case KindRate:
		if v.reset.Window == WindowNone && !v.reset.ResetAt.After(now.Add(r.MaxWait)) {
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
	wait := time.Until(na.RetryAt)
	if na.RetryAt.IsZero() || wait > r.MaxWait {
		return false, err
	}
	if sleep := wait - r.MinWait; sleep > 0 {
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
	host := ""
	if resp.Request != nil && resp.Request.URL != nil {
		host = resp.Request.URL.Host
	}
	return &ProviderError{Provider: host, Kind: v.kind, Status: resp.StatusCode,
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
// reset of its exhausted short window, else min·2^attempt — never more than
// max. Without an answer (a transport error, or no key free, which
// CheckRetry has already waited for) it is min.
func (r Retry) Backoff(min, max time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp == nil {
		return min
	}
	now := time.Now()
	if d, ok := RetryAfterFromHeaders(resp.Header, now); ok {
		return between(d, min, max)
	}
	if reset := ParseRateLimitReset(resp.Header, now); reset.exhausted(now) {
		return between(reset.ResetAt.Sub(now), min, max)
	}
	d := min
	for range attempt {
		if d >= max {
			break
		}
		d *= 2
	}
	return between(d, min, max)
}

// between returns d, raised to lo and lowered to hi.
func between(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}
