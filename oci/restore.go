package oci

import (
	"context"
	"fmt"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/units"
)

// StepRestore restores a container from CRIU's images of a checkpoint (Restore): its
// conmon, started with --restore, runs the runtime's restore instead of its create, and
// the container runs from then on, its processes where the checkpoint left them. Its
// undo is Delete, which is idempotent and kills a conmon, runtime or CRIU still at work.
// Args: ArgHandler and ArgID, and ArgCgroupsPath when it is a systemd scope. Made by
// RestoreStep. The string is stored in the journal: never change it.
const StepRestore journal.StepKind = "oci-restore"

// StageRestore is the stage of StepRestore, as inspect shows it.
const StageRestore = "container restore"

// RestoreRequest is a container to restore.
type RestoreRequest struct {
	ID string
	// LogPath, Terminal and Stdin are as for Prepare.
	LogPath  string
	Terminal bool
	Stdin    StdinMode
	// Images is the directory of CRIU's images (the archive's checkpoint/); Work is
	// CRIU's work directory (its restore.log). Both exist and are absolute.
	Images, Work string
	// Spec is the container's spec; its root filesystem holds the checkpointed one's
	// changes.
	Spec *specs.Spec
}

// RestoreStep returns the step that restores req's container in runtime r. Its result
// is the container's init PID.
func RestoreStep(r *Runtime, req RestoreRequest) journal.Action[int] {
	args := map[string]string{ArgHandler: r.Handler(), ArgID: req.ID}
	if req.Spec != nil && req.Spec.Linux != nil && units.IsPath(req.Spec.Linux.CgroupsPath) {
		args[ArgCgroupsPath] = req.Spec.Linux.CgroupsPath
	}
	return journal.Action[int]{Kind: StepRestore, Stage: StageRestore, Args: args,
		Run: func(ctx context.Context) (int, error) { return r.Restore(ctx, req) }}
}

// Restore restores req's container from CRIU's images and returns its init PID: conmon
// is started as Prepare does, with --restore, so that it runs `runc restore --detach
// --image-path <images>` (with the daemon's --file-locks, as the checkpoint was taken,
// and CRIU's work directory req.Work) where it would run `runc create`, under the
// bundle that Create writes. The container runs once Restore returns: there is no Start.
// On failure nothing of it is left (as for Create), and CRIU's own error lines are
// added to the runtime's message.
func (r *Runtime) Restore(ctx context.Context, req RestoreRequest) (int, error) {
	if !filepath.IsAbs(req.Images) || !filepath.IsAbs(req.Work) {
		return 0, fmt.Errorf("restore %s: image path %q and work path %q must be absolute", req.ID, req.Images, req.Work)
	}
	p, err := r.prepare(ctx, req.ID, req.LogPath, req.Terminal, req.Stdin, []string{
		"--restore", req.Images,
		// conmon gives the runtime the bundle as its work path; a later flag wins, and
		// CRIU's log is then kept (in the restore directory) when the restore fails.
		"--runtime-opt", "--work-path=" + req.Work,
		"--runtime-opt", "--file-locks",
	})
	if err != nil {
		return 0, fmt.Errorf("restore %s: %w", req.ID, err)
	}
	defer p.Close()
	pid, err := p.Create(ctx, req.Spec)
	if err != nil {
		if criu := criuErrors(filepath.Join(req.Work, "restore.log")); criu != "" {
			err = fmt.Errorf("%w; CRIU: %s", err, criu)
		}
		return 0, fmt.Errorf("restore: %w", err)
	}
	return pid, nil
}

// BundleOf is the bundle of container id once it is created or restored: its state
// directory (see Pending.Bundle).
func (r *Runtime) BundleOf(id string) string { return r.containerDir(id) }
