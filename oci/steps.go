package oci

import (
	"context"
	"fmt"

	"github.com/crijournal/crijournal/journal"
)

// StepRuntimeContainer creates a container in an OCI runtime (Create). Its undo is
// Delete, which is idempotent. Args: see ContainerArgs. The string is stored in the
// journal: never change it.
const StepRuntimeContainer journal.StepKind = "oci-container"

// Keys of StepRuntimeContainer's arguments.
const (
	ArgID      = "id"
	ArgHandler = "handler"
)

// ContainerArgs returns the journal arguments of a StepRuntimeContainer: everything
// Delete needs.
func ContainerArgs(handler, id string) map[string]string {
	return map[string]string{ArgHandler: handler, ArgID: id}
}

// RegisterUndos registers the undo of every step kind this package owns. runtimes
// returns the Runtime of a handler (the one recorded in the step), so that an undo
// run after a restart finds the right runtime.
func RegisterUndos(reg *journal.Registry, runtimes func(handler string) (*Runtime, error)) {
	reg.Register(StepRuntimeContainer, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		id, handler := step.Args[ArgID], step.Args[ArgHandler]
		if id == "" {
			return fmt.Errorf("undo %s: step has no %q argument", StepRuntimeContainer, ArgID)
		}
		r, err := runtimes(handler)
		if err != nil {
			return fmt.Errorf("undo %s of %s: runtime handler %q: %w", StepRuntimeContainer, id, handler, err)
		}
		return r.Delete(ctx, id)
	})
}
