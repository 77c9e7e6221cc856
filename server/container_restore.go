package server

// Restore from a checkpoint, as CRI-O does it (its server/container_restore.go): a
// CreateContainer whose image is a checkpoint archive (an absolute path of a file, as
// crictl passes it) or an OCI image holding an archive's files (annotated
// io.kubernetes.cri-o.annotations.checkpoint.name, or checkpointctl's
// org.criu.checkpoint.container.name: what the kubelet is given, since it takes no path
// for an image) creates a container that StartContainer restores with CRIU: the
// processes of the checkpointed container go on, in the new pod, from where they were.
//
// CreateContainer makes the container from the image the checkpointed one ran (from
// config.dump), with its process (from spec.dump) and the request's name, labels,
// annotations, mounts, resources and security context, and imports the archive
// (checkpoint.StepImport): CRIU's images go to a restore directory under the daemon's
// root, and the root filesystem gets the archive's changes. No runtime container is made
// yet. StartContainer then has conmon run the runtime's restore (oci.StepRestore). Both
// are journaled steps: a failure or a crash at any point leaves nothing of them (the
// restart undoes a restore it cut short, and the container is created again, as before
// the start).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage"
)

// restoreWorkDir is where restored containers' restore directories are, under the
// daemon's root: CRIU's images hold the container's memory, too much for the run root.
const restoreWorkDir = "restores"

// flowContainerStart names StartContainer in failure points.
const flowContainerStart = "container-start"

// Failure points of a restore at StartContainer: its intent committed, the restore not
// begun; the container restored, its step not yet done.
var (
	failpointRestoreAfterIntent = flowContainerStart + "/" + string(oci.StepRestore) + "/after-intent"
	failpointRestoreAfterAction = flowContainerStart + "/" + string(oci.StepRestore) + "/after-action"
)

// restoreSource is the checkpoint a CreateContainer restores from.
type restoreSource struct {
	from    string // the request's image: an archive's path or an image's name
	archive checkpoint.Archive
	open    checkpoint.Open
	// config is the container to create: see restoredConfig.
	config *runtimeapi.ContainerConfig
}

// restoreOf returns the checkpoint that cfg's image names, or nil when it names an
// ordinary image (or none this node has: the creation says so). Refused: a path that
// is not a file (NotFound when missing), a file or image that is not a checkpoint
// (InvalidArgument), a checkpoint whose image is not on the node (NotFound), or one
// whose bind mounts the request does not give (InvalidArgument).
func (s *Server) restoreOf(ctx context.Context, cfg *runtimeapi.ContainerConfig) (*restoreSource, error) {
	ref := cfg.GetImage().GetImage()
	var src restoreSource
	switch {
	case filepath.IsAbs(ref):
		fi, err := os.Stat(ref)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, newError(errNotFound, "checkpoint archive %s does not exist", ref)
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint archive %s: %w", ref, err)
		}
		if !fi.Mode().IsRegular() {
			return nil, invalidf("checkpoint archive %s is not a regular file", ref)
		}
		src = restoreSource{from: ref, open: func(context.Context) (io.ReadCloser, error) { return os.Open(ref) }}
	default:
		img, err := s.images.ImageStatus(ctx, ref)
		if err != nil {
			return nil, nil // not an image of this node: the creation refuses it
		}
		ann, err := s.images.ImageAnnotations(ctx, img.ID)
		if err != nil {
			return nil, err
		}
		if !checkpoint.IsCheckpointImage(ann) {
			return nil, nil
		}
		id := img.ID
		src = restoreSource{from: ref, open: func(ctx context.Context) (io.ReadCloser, error) { return s.images.ImageFiles(ctx, id) }}
	}
	rc, err := src.open(ctx)
	if errors.Is(err, storage.ErrLayered) {
		return nil, invalidf("checkpoint image %s: %v", ref, err)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", ref, err)
	}
	src.archive, err = checkpoint.ReadArchive(rc, ref)
	rc.Close()
	if errors.Is(err, checkpoint.ErrNotCheckpoint) {
		return nil, invalidf("cannot restore from %s: %v", ref, err)
	}
	if err != nil {
		return nil, err
	}
	image, err := s.checkpointImage(ctx, src.archive)
	if err != nil {
		return nil, err
	}
	if src.config, err = restoredConfig(cfg, src.archive, image, ref); err != nil {
		return nil, err
	}
	return &src, nil
}

// checkpointImage returns the image the checkpointed container ran, as this node names
// it: by its name, or else by the digest reference config.dump records.
func (s *Server) checkpointImage(ctx context.Context, a checkpoint.Archive) (string, error) {
	var tried []string
	for _, ref := range []string{a.Config.RootfsImageName, a.Config.RootfsImage, a.Config.RootfsImageRef} {
		if ref == "" || slices.Contains(tried, ref) {
			continue
		}
		tried = append(tried, ref)
		if _, err := s.images.ImageStatus(ctx, ref); err == nil {
			return ref, nil
		}
	}
	return "", newError(errNotFound, "the checkpoint was taken of a container of image %s, which is not present on this node: pull it first",
		strings.Join(tried, " or "))
}

// restoreIgnoredMounts are the mounts of a checkpointed container that the daemon makes
// for every container (CRI-O's list, with the daemon's /etc/hosts): the restored one
// gets its new pod's, and the request need not give them.
var restoreIgnoredMounts = map[string]bool{
	"/proc": true, "/dev": true, "/dev/pts": true, "/dev/mqueue": true, "/sys": true, "/sys/fs/cgroup": true,
	"/dev/shm": true, "/etc/resolv.conf": true, "/etc/hostname": true, "/etc/hosts": true,
	"/run/secrets": true, "/run/.containerenv": true,
}

// restoredConfig is the container a restore creates: the request's (its name, labels,
// annotations, mounts, devices, resources and security context: the new pod's), with the
// checkpointed container's image and process (command, environment, working directory,
// terminal), which CRIU restores. As CRI-O does, every bind mount of the checkpointed
// container must be among the request's mounts (else a checkpoint archive could mount
// host paths the request never asked for).
func restoredConfig(cfg *runtimeapi.ContainerConfig, a checkpoint.Archive, image, from string) (*runtimeapi.ContainerConfig, error) {
	var missing []string
	for _, m := range a.Spec.Mounts {
		if m.Type != "bind" || restoreIgnoredMounts[m.Destination] {
			continue
		}
		if !slices.ContainsFunc(cfg.GetMounts(), func(r *runtimeapi.Mount) bool { return r.GetContainerPath() == m.Destination }) {
			missing = append(missing, m.Destination)
		}
	}
	if len(missing) > 0 {
		return nil, invalidf("restoring %s needs the container's bind mounts at %s in the request", from, strings.Join(missing, ", "))
	}
	out := proto.Clone(cfg).(*runtimeapi.ContainerConfig)
	out.Image = &runtimeapi.ImageSpec{Image: image}
	p := a.Spec.Process
	out.Command, out.Args = slices.Clone(p.Args), nil
	out.WorkingDir = p.Cwd
	out.Tty = p.Terminal
	out.Envs = nil
	for _, kv := range p.Env {
		k, v, _ := strings.Cut(kv, "=")
		out.Envs = append(out.Envs, &runtimeapi.KeyValue{Key: k, Value: []byte(v)})
	}
	return out, nil
}

// restoreSpec makes spec, generated for the restored container, run the checkpointed
// container's process exactly as it ran (its arguments and environment, without the
// image's defaults added again) and mask the paths it masked: CRIU restores its mounts
// as they were.
func restoreSpec(spec *specs.Spec, a checkpoint.Archive) {
	if spec.Process != nil {
		spec.Process.Args = slices.Clone(a.Spec.Process.Args)
		spec.Process.Env = slices.Clone(a.Spec.Process.Env)
		spec.Process.Cwd = a.Spec.Process.Cwd
		spec.Process.Terminal = a.Spec.Process.Terminal
	}
	if spec.Linux != nil && a.Spec.Linux != nil {
		spec.Linux.MaskedPaths = slices.Clone(a.Spec.Linux.MaskedPaths)
		spec.Linux.ReadonlyPaths = slices.Clone(a.Spec.Linux.ReadonlyPaths)
	}
}

// restoreDirOf is the restore directory of container id.
func (s *Server) restoreDirOf(id string) string {
	return checkpoint.RestoreDir(filepath.Join(s.cfg.Root, restoreWorkDir), id)
}

// importCheckpoint is the restore's step of CreateContainer: the archive imported and
// the root filesystem given its changes (checkpoint.StepImport).
func (s *Server) importCheckpoint(c *creation.Creation, src *restoreSource, id, rootfs string) error {
	_, err := creation.Step(c, creation.Limit{Max: storageCreateTimeout}, checkpoint.ImportStep(src.open, s.restoreDirOf(id), rootfs))
	return err
}

// restoreState says where a container stands with its restore: whether it is one
// (imported from a checkpoint), its restore directory while that is kept, and whether
// the runtime has restored it.
type restoreState struct {
	restore  bool
	dir      string
	restored bool
}

func restoreStateOf(rec journal.Record) restoreState {
	var st restoreState
	for _, step := range rec.Steps {
		switch step.Kind {
		case checkpoint.StepImport:
			st.restore = true
			if step.Status == journal.StepDone {
				st.dir = step.Args[checkpoint.ArgDir]
			}
		case oci.StepRestore:
			if step.Status == journal.StepDone {
				st.restored = true
			}
		}
	}
	return st
}

// awaitsRestore reports whether c is a restored container that the runtime does not
// have yet (or is restoring): it has no exit to record.
func awaitsRestore(rec journal.Record) bool {
	st := restoreStateOf(rec)
	return st.restore && !st.restored
}

// startContainer starts created container c: the runtime's start, or, for a container
// created from a checkpoint, its restore.
func (s *Server) startContainer(ctx context.Context, c container, rt *oci.Runtime) error {
	if st := restoreStateOf(c.rec); st.restore && !st.restored {
		return s.restoreContainer(ctx, c, rt, st.dir)
	}
	return rt.Start(ctx, c.rec.ID)
}

// restoreContainer restores c from the images imported to dir, as the journaled step
// oci.StepRestore: its intent committed, conmon and the runtime's restore, the step
// done and the container marked started in one durable commit. A failure undoes the
// step (the container stays created, and may be started again); a crash is undone by
// the restart (reconcileRestore). Once restored, the images are removed (the import's
// undo): they are no longer needed, and as large as the container's memory.
func (s *Server) restoreContainer(ctx context.Context, c container, rt *oci.Runtime, dir string) error {
	id := c.rec.ID
	if dir == "" {
		return newError(errWrongState, "container %s: its checkpoint's files are gone (removed after an earlier restore): it cannot be restored again", id)
	}
	if _, busy := s.checkpoints.LoadOrStore(id, struct{}{}); busy {
		return newError(errWrongState, "container %s: a restore of it is under way", id)
	}
	defer s.checkpoints.Delete(id)
	spec, err := checkpoint.ReadSpec(dir)
	if err != nil {
		return fmt.Errorf("restore container %s: %w", id, err)
	}
	step := oci.RestoreStep(rt, oci.RestoreRequest{
		ID: id, LogPath: c.obj.LogPath, Terminal: c.config.GetTty(), Stdin: oci.StdinModeOf(c.config),
		Images: checkpoint.Images(dir), Work: filepath.Join(dir, checkpoint.WorkDir), Spec: spec,
	})
	started := time.Now()
	seq, err := s.journal.Intents(id, journal.Intended{Kind: step.Kind, Stage: step.Stage, Args: step.Args})
	if err != nil {
		return err
	}
	err = failpoint.Inject(failpointRestoreAfterIntent)
	if err == nil {
		rctx, cancel := detached(ctx, runtimeCreateTimeout)
		_, err = step.Run(rctx)
		cancel()
	}
	if err == nil {
		err = failpoint.Inject(failpointRestoreAfterAction)
	}
	if err != nil {
		uctx, cancel := detached(ctx, creation.UndoTimeout)
		defer cancel()
		if uerr := s.journal.UndoSteps(uctx, id, nil, oci.StepRestore); uerr != nil {
			err = fmt.Errorf("%w; and undoing it: %v (retried at the container's removal)", err, uerr)
		}
		return fmt.Errorf("restore container %s from its checkpoint: %w", id, err)
	}
	if err := s.journal.Done(id, seq); err != nil {
		return err
	}
	if err := s.journal.SetMarker(id, markerStartedAt, nowMarker()); err != nil {
		return err
	}
	s.log.Info("container restored from its checkpoint", "id", id, "name", c.rec.Name, "took", time.Since(started))
	uctx, cancel := detached(ctx, creation.UndoTimeout)
	defer cancel()
	if err := s.journal.UndoSteps(uctx, id, nil, checkpoint.StepImport); err != nil {
		s.log.Warn("restore: removing the checkpoint's files failed; retried at the container's removal", "id", id, "err", err)
	}
	return nil
}

// reconcileRestore undoes, at startup, a restore of rec that a crash cut short (its
// step in intent, or its undo failed): the container is created again, not restored.
// It reports whether it did anything.
func (s *Server) reconcileRestore(ctx context.Context, rec journal.Record) (bool, error) {
	cut := slices.ContainsFunc(rec.Steps, func(st journal.Step) bool {
		return st.Kind == oci.StepRestore && (st.Status == journal.StepIntent || st.Status == journal.StepUndoFailed)
	})
	if !cut {
		return false, nil
	}
	uctx, cancel := detached(ctx, creation.UndoTimeout)
	defer cancel()
	if err := s.journal.UndoSteps(uctx, rec.ID, nil, oci.StepRestore); err != nil {
		return true, fmt.Errorf("container %s: undo of an interrupted restore: %w", rec.ID, err)
	}
	s.log.Info("restore cut short by a crash undone: the container is created, not restored", "id", rec.ID, "name", rec.Name)
	return true, nil
}
