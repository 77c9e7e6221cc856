package units

import (
	"context"
	"fmt"

	"github.com/crijournal/crijournal/journal"
)

// StepSlice starts a pod's slice, the sandbox's cgroup_parent, when systemd does not
// have it (a kubelet with cgroupDriver: systemd makes its pods' slices itself, and then
// there is no step). Its undo stops the slice (see StopSlice). Args: ArgUnit. Made by
// SliceStep. The string is stored in the journal: never change it.
const StepSlice journal.StepKind = "systemd-slice"

// StageSlice is the stage of a StepSlice, as inspect, logs and waiting requests show it.
const StageSlice = "pod slice creation"

// ArgUnit is the key of StepSlice's argument: the slice's unit name.
const ArgUnit = "unit"

// SliceStep returns the step that starts slice name (see StartSlice).
func SliceStep(name string) journal.Action[struct{}] {
	return journal.Action[struct{}]{Kind: StepSlice, Stage: StageSlice, Args: map[string]string{ArgUnit: name},
		Run: func(ctx context.Context) (struct{}, error) {
			return struct{}{}, StartSlice(name)
		}}
}

// RegisterUndos registers the undo of every step kind this package owns.
func RegisterUndos(reg *journal.Registry) {
	reg.Register(StepSlice, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		name := step.Args[ArgUnit]
		if name == "" {
			return fmt.Errorf("undo %s: step has no %q argument", StepSlice, ArgUnit)
		}
		return StopSlice(ctx, name)
	})
}
