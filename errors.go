package keypool

import (
	"fmt"
	"time"
)

// NoAvailableKeyError is returned when no key of the pool can take a request:
// every key is benched, or its windows are full. RetryAt is the soonest
// moment a key comes back; a request made then goes through.
//
// errors.As finds it through the *url.Error an http.Client wraps it in, and
// also finds a *ProviderError of kind KindRate whose RetryAfter is the wait
// until RetryAt, so code that handles vendor throttles handles this too.
type NoAvailableKeyError struct {
	Provider string
	RetryAt  time.Time

	wait     time.Duration // RetryAt less the moment the error was made
	last     error         // the last failure of Pool.Do's function, if any
	disabled int           // the keys passed over as out of rotation (Pool.Disable)
}

// noKeyError returns the error of a request no key of provider could take
// at now; retryAt is the soonest return, zero when unknown.
func noKeyError(provider string, retryAt, now time.Time) *NoAvailableKeyError {
	e := &NoAvailableKeyError{Provider: provider, RetryAt: retryAt}
	if !retryAt.IsZero() {
		e.wait = max(retryAt.Sub(now), 0)
	}
	return e
}

func (e *NoAvailableKeyError) Error() string {
	disabled := ""
	if e.disabled > 0 {
		disabled = fmt.Sprintf("%d disabled", e.disabled)
	}
	if e.RetryAt.IsZero() {
		if disabled != "" {
			return fmt.Sprintf("keypool: no %s key available (%s)", e.Provider, disabled)
		}
		return fmt.Sprintf("keypool: no %s key available", e.Provider)
	}
	if disabled != "" {
		disabled = "; " + disabled
	}
	return fmt.Sprintf("keypool: no %s key available until %s (in %s%s)",
		e.Provider, e.RetryAt.UTC().Format(time.RFC3339), e.wait.Round(time.Millisecond), disabled)
}

// Unwrap returns a *ProviderError of kind KindRate whose RetryAfter is the
// wait until RetryAt and, from Pool.Do, the last error of its function.
func (e *NoAvailableKeyError) Unwrap() []error {
	pe := &ProviderError{Provider: e.Provider, Kind: KindRate, RetryAfter: e.wait, ResetAt: e.RetryAt}
	if e.last == nil {
		return []error{pe}
	}
	return []error{pe, e.last}
}

// ProviderError is a vendor failure with what is known of it: its kind, the
// HTTP status if there was one, how long to wait and when the limit lifts.
// Pool.Do reads it from the error of its function to decide the bench. It
// never holds a secret.
type ProviderError struct {
	// Provider is the pool's provider name; empty when the error was made
	// without a pool (Retry's errors).
	Provider string
	// KeyID is the key that failed, when known.
	KeyID  string
	Kind   Kind
	Status int
	// RetryAfter is the sleep the vendor asked for, or 0.
	RetryAfter time.Duration
	// ResetAt is when the limit lifts, or zero if unknown.
	ResetAt time.Time
	// Window is the window the vendor named, if any.
	Window Window
}

func (e *ProviderError) Error() string {
	s := "keypool: "
	if e.Provider != "" {
		s += e.Provider + ": "
	}
	if e.KeyID != "" {
		s += "key " + e.KeyID + ": "
	}
	s += e.Kind.String()
	if e.Window != WindowNone {
		s += " (" + string(e.Window) + " window)"
	}
	if e.Status != 0 {
		s += fmt.Sprintf(", status %d", e.Status)
	}
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(", retry after %s", e.RetryAfter.Round(time.Millisecond))
	}
	if !e.ResetAt.IsZero() {
		s += ", resets " + e.ResetAt.UTC().Format(time.RFC3339)
	}
	return s
}

// truncate returns s cut to n bytes, marked when cut, for an error that
// quotes what a client sent.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
