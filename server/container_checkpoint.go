package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// checkpointWorkDir is where exports gather their files, under the daemon's root: CRIU's
// images hold the container's memory, too much for the run root's tmpfs.
const checkpointWorkDir = "checkpoints"

// CheckpointContainer writes a checkpoint archive of a running container to the
// request's location (see package checkpoint), leaving the container running, as the
// kubelet's checkpoint API (forensic container checkpointing) expects and as CRI-O and
// containerd do. The export is a journaled step of the container's record; whatever its
// outcome, its undo then removes what it gathered, so that only the archive remains. A
// timeout in the request shortens the request's own deadline. Refused: an unknown
// container (NotFound), one that does not run (FailedPrecondition), a location that is
// not an absolute path of a file in an existing directory (InvalidArgument), a second
// export of a container while one runs (FailedPrecondition). CreateContainer restores
// from an archive (container_restore.go).
func (s *Server) CheckpointContainer(ctx context.Context, req *runtimeapi.CheckpointContainerRequest) (*runtimeapi.CheckpointContainerResponse, error) {
	c, err := s.findContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if s.runtimes == nil || s.images == nil {
		return nil, newError(errUnavailable, "this daemon runs no containers")
	}
	if req.GetTimeout() < 0 {
		return nil, invalidf("checkpoint of container %s: negative timeout %d", c.rec.ID, req.GetTimeout())
	}
	job, err := checkpoint.Plan(filepath.Join(s.cfg.Root, checkpointWorkDir), req.GetLocation(), c.rec.ID, c.obj.Handler)
	if err != nil {
		return nil, err
	}
	if _, busy := s.checkpoints.LoadOrStore(c.rec.ID, struct{}{}); busy {
		return nil, newError(errWrongState, "container %s: another checkpoint of it is under way", c.rec.ID)
	}
	defer s.checkpoints.Delete(c.rec.ID)
	if err := s.recordExit(ctx, c); err != nil {
		s.log.Warn("container exit not readable", "id", c.rec.ID, "name", c.rec.Name, "err", err)
	}
	if c, err = s.findContainer(c.rec.ID); err != nil {
		return nil, err
	}
	if st := c.state(); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, errContainerState(c.rec.ID, st, "RUNNING to checkpoint it")
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return nil, err
	}
	src, err := s.checkpointSource(c)
	if err != nil {
		return nil, err
	}
	if t := req.GetTimeout(); t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(t)*time.Second)
		defer cancel()
	}

	start := time.Now()
	if _, err := s.journal.Intents(c.rec.ID, job.Step()); err != nil {
		return nil, err
	}
	err = checkpoint.Export(ctx, rt, job, src)
	// Whatever happened, what the export gathered goes (never the archive); a failed
	// undo is retried by the journal with the container's removal.
	uctx, cancel := detached(ctx, creation.UndoTimeout)
	defer cancel()
	if uerr := s.journal.UndoSteps(uctx, c.rec.ID, nil, checkpoint.StepExport); uerr != nil {
		s.log.Warn("checkpoint: removing its work files failed; retried at the container's removal", "id", c.rec.ID, "err", uerr)
	}
	if err != nil {
		switch {
		case errors.Is(err, oci.ErrNotRunning):
			return nil, newError(errWrongState, "container %s is not running: %v", c.rec.ID, err)
		case errors.Is(err, oci.ErrNotFound):
			return nil, newError(errWrongState, "container %s is not known to its runtime: %v", c.rec.ID, err)
		case errors.Is(err, context.DeadlineExceeded):
			return nil, newError(errTimedOut, "checkpoint of container %s did not finish in time: %v", c.rec.ID, err)
		}
		return nil, fmt.Errorf("checkpoint of container %s: %w", c.rec.ID, err)
	}
	s.log.Info("container checkpointed", "id", c.rec.ID, "name", c.rec.Name, "location", job.Location, "took", time.Since(start))
	return &runtimeapi.CheckpointContainerResponse{}, nil
}

// checkpointSource gathers what an archive holds besides CRIU's images: the config and
// spec dumps, the status, the log and the root filesystem's changes.
func (s *Server) checkpointSource(c container) (checkpoint.Source, error) {
	var spec specs.Spec
	b, err := os.ReadFile(filepath.Join(c.obj.Bundle, "config.json"))
	if err != nil {
		return checkpoint.Source{}, fmt.Errorf("checkpoint of container %s: its spec: %w", c.rec.ID, err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return checkpoint.Source{}, fmt.Errorf("checkpoint of container %s: its spec: %w", c.rec.ID, err)
	}
	var podName, podNamespace, podUID string
	if sb, err := s.findSandbox(c.obj.SandboxID); err == nil {
		md := sb.config.GetMetadata()
		podName, podNamespace, podUID = md.GetName(), md.GetNamespace(), md.GetUid()
	}
	status := c.status()
	spec.Annotations = checkpoint.Annotations(spec.Annotations, c.config.GetMetadata().GetName(),
		podName, podNamespace, podUID, c.obj.SandboxID, status.GetImage().GetImage())
	statusJSON, err := protojson.Marshal(status)
	if err != nil {
		return checkpoint.Source{}, err
	}
	mounts := map[string]bool{}
	for _, m := range spec.Mounts {
		mounts[m.Destination] = true
	}
	rootfs := c.obj.Rootfs
	return checkpoint.Source{
		Config: metadata.ContainerConfig{
			ID: c.rec.ID, Name: c.config.GetMetadata().GetName(),
			RootfsImage: status.GetImage().GetImage(), RootfsImageRef: c.obj.ImageRef, RootfsImageName: c.obj.Image,
			OCIRuntime: c.obj.Handler, CreatedTime: c.obj.CreatedAt, CheckpointedAt: time.Now(),
		},
		Spec: &spec, Status: statusJSON, LogPath: c.obj.LogPath,
		RootfsDiff: func(ctx context.Context, w io.Writer) ([]string, error) {
			return s.images.RootfsDiff(ctx, c.rec.ID, rootfs, w, func(path string) bool {
				return mounts[path] || underRuntimeMount(path)
			})
		},
	}, nil
}

// underRuntimeMount reports whether path is in one of the file systems the runtime
// mounts over the root filesystem (their mount points are made in it), as CRI-O and
// Podman leave them out of a checkpoint's root filesystem diff.
func underRuntimeMount(path string) bool {
	for _, m := range []string{"/dev", "/proc", "/sys", "/run/.containerenv", "/run/secrets"} {
		if path == m || strings.HasPrefix(path, m+"/") {
			return true
		}
	}
	return false
}

// pendingCheckpoint reports whether rec has an export whose undo has not run: one a
// crash cut short.
func pendingCheckpoint(rec journal.Record) bool {
	for _, st := range rec.Steps {
		if st.Kind == checkpoint.StepExport && (st.Status == journal.StepIntent || st.Status == journal.StepDone || st.Status == journal.StepUndoFailed) {
			return true
		}
	}
	return false
}
