package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

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

// TestToStatus pins the mapping of error classes to gRPC codes, and that the message a
// client sees says what failed once: no class name added, no "rpc error" inside it.
func TestToStatus(t *testing.T) {
	tests := []struct {
		class error // the class the row is about; nil for an error of none
		err   error
		want  codes.Code
	}{
		{errInvalid, invalidf("config is required"), codes.InvalidArgument},
		{errNotFound, newError(errNotFound, "sandbox %s not found", "abc"), codes.NotFound},
		{errNotYetCreated, newError(errNotYetCreated, "sandbox abc is not yet created"), codes.NotFound},
		{errWrongState, newError(errWrongState, "container is EXITED, want RUNNING"), codes.FailedPrecondition},
		{errUnavailable, newError(errUnavailable, "no storage"), codes.Unavailable},
		{errTimedOut, newError(errTimedOut, "not finished within network_timeout (1s): %w", errors.New("cni add")), codes.DeadlineExceeded},
		{errBusy, newError(errBusy, "32 ExecSync calls are running"), codes.ResourceExhausted},

		{creation.ErrTimedOut, fmt.Errorf("not finished within network_timeout (1s): %w", creation.ErrTimedOut), codes.DeadlineExceeded},
		{creation.ErrNameTaken, fmt.Errorf("sandbox name \"pod\" is already used: %w", creation.ErrNameTaken), codes.AlreadyExists},
		{journal.ErrInvalid, fmt.Errorf("begin: %w", journal.ErrInvalid), codes.InvalidArgument},
		{netns.ErrInvalid, fmt.Errorf("x: %w", netns.ErrInvalid), codes.InvalidArgument},
		{oci.ErrInvalidSpec, fmt.Errorf("spec: %w: working dir", oci.ErrInvalidSpec), codes.InvalidArgument},
		{oci.ErrUnknownHandler, &oci.UnknownHandlerError{Handler: "kata", Configured: []string{"runc"}}, codes.InvalidArgument},
		{storage.ErrInvalidReference, fmt.Errorf("pull: %w", storage.ErrInvalidReference), codes.InvalidArgument},
		{journal.ErrNotFound, fmt.Errorf("x: %w", journal.ErrNotFound), codes.NotFound},
		{nri.ErrPlugin, fmt.Errorf("create: %w", nri.ErrPlugin), codes.FailedPrecondition},
		{storage.ErrImageNotFound, fmt.Errorf("status: %w", storage.ErrImageNotFound), codes.NotFound},
		{journal.ErrNameHeld, &journal.HeldError{}, codes.AlreadyExists},
		{netns.ErrNoNetwork, fmt.Errorf("x: %w", netns.ErrNoNetwork), codes.FailedPrecondition},
		{storage.ErrImageInUse, fmt.Errorf("remove image: %w", storage.ErrImageInUse), codes.FailedPrecondition},
		{storage.ErrRootfsUnreachable, fmt.Errorf("create container: %w", storage.ErrRootfsUnreachable), codes.FailedPrecondition},
		{storage.ErrAmbiguousShortName, fmt.Errorf("pull busybox: %w", storage.ErrAmbiguousShortName), codes.InvalidArgument},
		{storage.ErrRegistryBlocked, fmt.Errorf("pull: %w", storage.ErrRegistryBlocked), codes.PermissionDenied},
		{storage.ErrRejectedByPolicy, fmt.Errorf("pull: %w", storage.ErrRejectedByPolicy), codes.PermissionDenied},
		{storage.ErrPullNoProgress, fmt.Errorf("pull: %w", storage.ErrPullNoProgress), codes.DeadlineExceeded},
		{storage.ErrDiskFull, fmt.Errorf("pull: %w", storage.ErrDiskFull), codes.ResourceExhausted},
		{journal.ErrClosed, fmt.Errorf("intent: %w", journal.ErrClosed), codes.Unavailable},
		{journal.ErrFailed, fmt.Errorf("intent: %w", journal.ErrFailed), codes.Unavailable},
		{journal.ErrLowSpace, fmt.Errorf("begin: %w", journal.ErrLowSpace), codes.ResourceExhausted},
		{oci.ErrExecTimeout, fmt.Errorf("exec: %w", oci.ErrExecTimeout), codes.DeadlineExceeded},
		{oci.ErrNoDefaultAppArmor, fmt.Errorf("spec: %w: loading it failed", oci.ErrNoDefaultAppArmor), codes.FailedPrecondition},
		{oci.ErrNoPodCgroup, fmt.Errorf("update pod abc: %w", oci.ErrNoPodCgroup), codes.FailedPrecondition},
		{checkpoint.ErrInvalidLocation, fmt.Errorf("checkpoint: %w: relative", checkpoint.ErrInvalidLocation), codes.InvalidArgument},
		{context.DeadlineExceeded, fmt.Errorf("x: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{context.Canceled, fmt.Errorf("x: %w", context.Canceled), codes.Canceled},

		// The server's class decides over a package's it wraps.
		{nil, newError(errWrongState, "cannot create pod network: %w", fmt.Errorf("load: %w", netns.ErrInvalid)), codes.FailedPrecondition},
		// A failed creation keeps its cause's class.
		{nil, fmt.Errorf("sandbox k8s_a_b_c_0: sandbox network creation: %w",
			newError(errTimedOut, "not finished within network_timeout (1s): %w", context.DeadlineExceeded)), codes.DeadlineExceeded},
		// A status made elsewhere keeps its code.
		{nil, status.Error(codes.ResourceExhausted, "kept"), codes.ResourceExhausted},
		{nil, fmt.Errorf("wrapped: %w", status.Error(codes.ResourceExhausted, "kept")), codes.ResourceExhausted},
		{nil, errors.New("plain"), codes.Unknown},
	}
	covered := map[error]bool{}
	for _, tt := range tests {
		covered[tt.class] = true
		got := toStatus(tt.err)
		if code := status.Code(got); code != tt.want {
			t.Errorf("toStatus(%v) = %v, want %v", tt.err, code, tt.want)
		}
		msg := status.Convert(got).Message()
		if want := strings.TrimPrefix(tt.err.Error(), "rpc error: code = ResourceExhausted desc = "); tt.want != codes.ResourceExhausted && msg != want {
			t.Errorf("toStatus(%v) says %q, want the error's own message", tt.err, msg)
		}
		if n := strings.Count(got.Error(), "rpc error"); n != 1 {
			t.Errorf("toStatus(%v) = %q: says \"rpc error\" %d times, want once", tt.err, got, n)
		}
	}
	for _, c := range classes {
		if !covered[c.class] {
			t.Errorf("class %q maps to %v but has no row in this table", c.class, c.code)
		}
	}
}
