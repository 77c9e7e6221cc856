package creation

import (
	"errors"
	"fmt"
)

// Classes of the errors the engine makes itself. The server maps them to gRPC codes at its
// edge; a step's own error is wrapped, not classed, so that its class still decides.
var (
	// ErrTimedOut is returned when a request is answered at, or cut off by, a deadline: a
	// step not finished within its limit, a creation finished after its request's
	// deadline (cached for the retry), a retry that waited on a creation in progress.
	ErrTimedOut = errors.New("deadline exceeded")
	// ErrNameTaken is returned when a request's name is held by a different request's
	// creation.
	ErrNameTaken = errors.New("already exists")
)

// classed is an error of a class, with a message that does not repeat the class's name.
type classed struct {
	class error
	err   error
}

func (e *classed) Error() string   { return e.err.Error() }
func (e *classed) Unwrap() []error { return []error{e.err, e.class} }

// newError returns an error of class with a message formatted as fmt.Errorf does (so %w
// wraps a cause too).
func newError(class error, format string, args ...any) error {
	return &classed{class: class, err: fmt.Errorf(format, args...)}
}
