package operation

import "errors"

// PermanentError is an error of Run that ends the operation at once:
// Failed with its Reason, no attempt left for it.
type PermanentError struct {
	// Reason is the Record's Reason; ReasonFailed if empty.
	Reason string
	Err    error
}

func (e *PermanentError) Error() string { return e.Err.Error() }

func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err, returned by Run, so that the operation is not
// attempted again: another attempt cannot help (a refused request, bad
// input). reason becomes the Record's Reason.
func Permanent(reason string, err error) error {
	return &PermanentError{Reason: reason, Err: err}
}

func permanent(err error) (string, bool) {
	var p *PermanentError
	if !errors.As(err, &p) {
		return "", false
	}
	if p.Reason == "" {
		return ReasonFailed, true
	}
	return p.Reason, true
}
