package oci

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/journal"
)

// StepRuntimeContainer creates a container in an OCI runtime (Create). Its undo is
// Delete, which is idempotent. Args: ArgHandler and ArgID. Made by CreateStep. The string
// is stored in the journal: never change it.
const StepRuntimeContainer journal.StepKind = "oci-container"

// StageCreate is the stage of a StepRuntimeContainer, as inspect, logs and waiting
// requests show it.
const StageCreate = "container runtime creation"

// Keys of StepRuntimeContainer's arguments.
const (
	ArgID      = "id"
	ArgHandler = "handler"
)

// CreateStep returns the step that creates container id in runtime r from the bundle
// directory, the spec, the log path and the standard input mode (see Runtime.Create).
// Its result is the container's init PID (not conmon's).
func CreateStep(r *Runtime, id, bundle string, spec *specs.Spec, logPath string, stdin StdinMode) journal.Action[int] {
	return journal.Action[int]{Kind: StepRuntimeContainer, Stage: StageCreate,
		Args: map[string]string{ArgHandler: r.Handler(), ArgID: id},
		Run: func(ctx context.Context) (int, error) {
			return r.Create(ctx, id, bundle, spec, logPath, stdin)
		}}
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
