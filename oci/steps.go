package oci

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/units"
)

// StepRuntimeContainer creates a container in an OCI runtime (Create). Its undo is
// Delete, which is idempotent. Args: ArgHandler and ArgID, and ArgCgroupsPath when it
// is a systemd scope (records written before the systemd driver lack it). Made by
// CreateStep. The string
// is stored in the journal: never change it.
const StepRuntimeContainer journal.StepKind = "oci-container"

// StageCreate is the stage of a StepRuntimeContainer, as inspect, logs and waiting
// requests show it.
const StageCreate = "container runtime creation"

// Keys of StepRuntimeContainer's arguments.
const (
	ArgID      = "id"
	ArgHandler = "handler"
	// ArgCgroupsPath is the container's systemd cgroupsPath ("slice:prefix:name"): the
	// scopes runc makes for it and Create makes for its conmon are units, and their names
	// are journaled before they are asked for, so that the undo stops them even when
	// the runtime's state directory, where Create records them too, is gone.
	ArgCgroupsPath = "cgroups_path"
)

// CreateStep returns the step that creates container id in runtime r from the bundle
// directory, the spec, the log path and the standard input mode (see Runtime.Create).
// Its result is the container's init PID (not conmon's).
func CreateStep(r *Runtime, id, bundle string, spec *specs.Spec, logPath string, stdin StdinMode) journal.Action[int] {
	args := map[string]string{ArgHandler: r.Handler(), ArgID: id}
	if spec != nil && spec.Linux != nil && units.IsPath(spec.Linux.CgroupsPath) {
		args[ArgCgroupsPath] = spec.Linux.CgroupsPath
	}
	return journal.Action[int]{Kind: StepRuntimeContainer, Stage: StageCreate, Args: args,
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
		if err := r.Delete(ctx, id); err != nil {
			return err
		}
		if p := step.Args[ArgCgroupsPath]; p != "" {
			return stopScopes(ctx, p, id) // done by Delete unless its record was gone
		}
		return nil
	})
}
