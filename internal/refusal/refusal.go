// Package refusal marks the errors of a request refused for what the
// request itself holds — a model name no store may keep, a model without a
// price that only budgeted keys could take — so that a proxy can answer
// them as its client's mistake rather than as a failure upstream.
package refusal

import "fmt"

// Error is a request's own fault. Wrapped in other errors, errors.As finds
// it.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// Errorf returns an Error of the formatted text.
func Errorf(format string, args ...any) *Error {
	return &Error{fmt.Sprintf(format, args...)}
}
