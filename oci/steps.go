package oci

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/units"
)

// StepConmon starts a container's conmon, held until the runtime step gives it the
// spec (Runtime.Prepare), so that its start overlaps the steps in between. Its undo
// finds nothing to do once the container's state directory is gone (the undo of the
// later StepRuntimeContainer, Delete, removed it), and is otherwise Delete without
// the grace for conmon to record an exit (a held conmon has none to record); it is
// idempotent. Args: ArgHandler and ArgID. Made by ConmonStep. The string is
// stored in the journal: never change it.
const StepConmon journal.StepKind = "oci-conmon"

// StepRuntimeContainer creates a container in an OCI runtime under the conmon of its
// StepConmon (Pending.Create). Its undo is Delete, which is idempotent. Args:
// ArgHandler and ArgID, and ArgCgroupsPath when it is a systemd scope (records written
// before the systemd driver lack it). Made by CreateStep. The string is stored in the
// journal: never change it.
const StepRuntimeContainer journal.StepKind = "oci-container"

// Stages of StepConmon and StepRuntimeContainer, as inspect, logs and waiting requests
// show them.
const (
	StageConmon = "container monitor start"
	StageCreate = "container runtime creation"
)

// Keys of the steps' arguments.
const (
	ArgID      = "id"
	ArgHandler = "handler"
	// ArgCgroupsPath is the container's systemd cgroupsPath ("slice:prefix:name"): the
	// scopes runc makes for it and Create makes for its conmon are units, and their names
	// are journaled before they are asked for, so that the undo stops them even when
	// the runtime's state directory, where Create records them too, is gone.
	ArgCgroupsPath = "cgroups_path"
)

// ConmonStep returns the step that starts the conmon of container id in runtime r,
// held (see Runtime.Prepare for the arguments). Its result is the Pending that
// CreateStep's step starts; the caller closes it.
func ConmonStep(r *Runtime, id, logPath string, terminal bool, stdin StdinMode) journal.Action[*Pending] {
	return journal.Action[*Pending]{Kind: StepConmon, Stage: StageConmon,
		Args: map[string]string{ArgHandler: r.Handler(), ArgID: id},
		Run: func(ctx context.Context) (*Pending, error) {
			return r.Prepare(ctx, id, logPath, terminal, stdin)
		}}
}

// CreateStep returns the step that creates the container of p, held by ConmonStep's
// step, from spec (see Pending.Create). Its result is the container's init PID (not
// conmon's).
func CreateStep(p *Pending, spec *specs.Spec) journal.Action[int] {
	args := map[string]string{ArgHandler: p.r.Handler(), ArgID: p.id}
	if spec != nil && spec.Linux != nil && units.IsPath(spec.Linux.CgroupsPath) {
		args[ArgCgroupsPath] = spec.Linux.CgroupsPath
	}
	return journal.Action[int]{Kind: StepRuntimeContainer, Stage: StageCreate, Args: args,
		Run: func(ctx context.Context) (int, error) {
			return p.Create(ctx, spec)
		}}
}

// RegisterUndos registers the undo of every step kind this package owns. runtimes
// returns the Runtime of a handler (the one recorded in the step), so that an undo
// run after a restart finds the right runtime.
func RegisterUndos(reg *journal.Registry, runtimes func(handler string) (*Runtime, error)) {
	reg.Register(StepConmon, undoContainer(StepConmon, runtimes, (*Runtime).abandon))
	reg.Register(StepRuntimeContainer, undoContainer(StepRuntimeContainer, runtimes, (*Runtime).Delete))
	reg.Register(StepRestore, undoContainer(StepRestore, runtimes, (*Runtime).Delete))
}

// undoContainer is the undo of a step of kind that made container (or conmon)
// step.Args[ArgID]: remove (Delete, or abandon for the conmon step), then the systemd
// scopes the step journaled.
func undoContainer(kind journal.StepKind, runtimes func(handler string) (*Runtime, error), remove func(r *Runtime, ctx context.Context, id string) error) journal.UndoFunc {
	return func(ctx context.Context, rec journal.Record, step journal.Step) error {
		id, handler := step.Args[ArgID], step.Args[ArgHandler]
		if id == "" {
			return fmt.Errorf("undo %s: step has no %q argument", kind, ArgID)
		}
		r, err := runtimes(handler)
		if err != nil {
			return fmt.Errorf("undo %s of %s: runtime handler %q: %w", kind, id, handler, err)
		}
		if err := remove(r, ctx, id); err != nil {
			return err
		}
		if p := step.Args[ArgCgroupsPath]; p != "" {
			return stopScopes(ctx, p, id) // done by Delete unless its record was gone
		}
		return nil
	}
}
