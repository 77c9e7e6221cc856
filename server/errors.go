package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/nri"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage"
)

// Classes of the errors the server makes itself. Handlers return plain Go errors that wrap
// one of these or a typed error of the packages below (see classes); toStatus, at the edge,
// turns them into gRPC status errors. No handler chooses a code.
var (
	// errInvalid is the class of requests that are malformed or ask for what cannot be.
	errInvalid = errors.New("invalid argument")
	// errNotFound is the class of IDs and names that no created resource has.
	errNotFound = errors.New("not found")
	// errNotYetCreated is the class of IDs whose resource exists in the journal but was
	// never handed to a client (in progress, or cached for a retry): hidden, as CRI-O
	// hides it. It answers NotFound, but a stop or removal of it is not a success.
	errNotYetCreated = errors.New("not yet created")
	// errWrongState is the class of operations the resource's state does not allow now.
	errWrongState = errors.New("failed precondition")
	// errUnavailable is the class of services this daemon does not offer.
	errUnavailable = errors.New("unavailable")
	// errTimedOut is the class of requests answered at, or cut off by, a deadline.
	errTimedOut = errors.New("deadline exceeded")
	// errBusy is the class of requests refused because a cap of the daemon's (such as
	// exec_sync_max_concurrent) is reached: the same request may succeed later.
	errBusy = errors.New("resource exhausted")
)

// classes maps error classes to gRPC codes: the one place codes are chosen. The first
// class an error wraps decides, so the server's own classes come before the packages'.
var classes = []struct {
	class error
	code  codes.Code
}{
	{errInvalid, codes.InvalidArgument},
	{errNotFound, codes.NotFound},
	{errNotYetCreated, codes.NotFound},
	{errWrongState, codes.FailedPrecondition},
	{errUnavailable, codes.Unavailable},
	{errTimedOut, codes.DeadlineExceeded},
	{errBusy, codes.ResourceExhausted},

	{creation.ErrTimedOut, codes.DeadlineExceeded},
	{creation.ErrNameTaken, codes.AlreadyExists},
	{journal.ErrInvalid, codes.InvalidArgument},
	{journal.ErrNotFound, codes.NotFound},
	{journal.ErrNameHeld, codes.AlreadyExists},
	{journal.ErrClosed, codes.Unavailable},
	{journal.ErrFailed, codes.Unavailable},
	{journal.ErrLowSpace, codes.ResourceExhausted},
	{netns.ErrInvalid, codes.InvalidArgument},
	{netns.ErrNoNetwork, codes.FailedPrecondition},
	{checkpoint.ErrInvalidLocation, codes.InvalidArgument},
	{oci.ErrInvalidSpec, codes.InvalidArgument},
	{oci.ErrUnknownHandler, codes.InvalidArgument},
	{oci.ErrExecTimeout, codes.DeadlineExceeded},
	{oci.ErrNoDefaultAppArmor, codes.FailedPrecondition},
	{oci.ErrNoPodCgroup, codes.FailedPrecondition},
	{nri.ErrPlugin, codes.FailedPrecondition},
	{storage.ErrImageNotFound, codes.NotFound},
	{storage.ErrImageInUse, codes.FailedPrecondition},
	{storage.ErrRootfsUnreachable, codes.FailedPrecondition},
	{storage.ErrInvalidReference, codes.InvalidArgument},
	{storage.ErrAmbiguousShortName, codes.InvalidArgument},
	{storage.ErrRegistryBlocked, codes.PermissionDenied},
	{storage.ErrRejectedByPolicy, codes.PermissionDenied},
	{storage.ErrPullNoProgress, codes.DeadlineExceeded},
	{storage.ErrDiskFull, codes.ResourceExhausted},
	{context.DeadlineExceeded, codes.DeadlineExceeded},
	{context.Canceled, codes.Canceled},
}

// toStatus turns a handler's error into a gRPC status error with the code of the first
// class it wraps (Unknown for none) and its message, which says what failed once. A status
// error made elsewhere keeps its code; when it is wrapped, its "rpc error: code = ... desc
// =" prefix is dropped from the message, so that the client does not see it twice. A nil
// error stays nil.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err
	}
	var inner interface {
		error
		GRPCStatus() *status.Status
	}
	if errors.As(err, &inner) {
		st := inner.GRPCStatus()
		return status.Error(st.Code(), strings.Replace(err.Error(), inner.Error(), st.Message(), 1))
	}
	return status.Error(codeOf(err), err.Error())
}

// codeOf returns the code of the first class err wraps, Unknown for none.
func codeOf(err error) codes.Code {
	for _, c := range classes {
		if errors.Is(err, c.class) {
			return c.code
		}
	}
	return codes.Unknown
}

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

func invalidf(format string, args ...any) error { return newError(errInvalid, format, args...) }
