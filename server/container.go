package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// Markers of a container record. They are stored on disk.
const (
	markerStartedAt  = "started_at"
	markerFinishedAt = "finished_at"
	markerExitCode   = "exit_code"
	markerReason     = "reason"
)

// containerObject is what the journal keeps of a created container (Record.Object).
type containerObject struct {
	Config    []byte    `json:"config"` // ContainerConfig, protobuf
	SandboxID string    `json:"sandbox_id"`
	Image     string    `json:"image"`    // as requested
	ImageID   string    `json:"image_id"` // storage ID
	ImageRef  string    `json:"image_ref"`
	Handler   string    `json:"handler"`
	LogPath   string    `json:"log_path,omitempty"`
	Bundle    string    `json:"bundle"`
	Rootfs    string    `json:"rootfs"`
	StopSig   string    `json:"stop_signal,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// User is the process's user as the spec set it; Resources the
	// LinuxContainerResources (protobuf) last set by UpdateContainerResources.
	User      *specs.User `json:"user,omitempty"`
	Resources []byte      `json:"resources,omitempty"`
}

// container is a created container as the server sees it.
type container struct {
	rec    journal.Record
	obj    containerObject
	config *runtimeapi.ContainerConfig
}

func decodeContainer(rec journal.Record) (container, error) {
	c := container{rec: rec, config: &runtimeapi.ContainerConfig{}}
	err := decodeObject(rec, &c.obj, &c.obj.Config, c.config)
	return c, err
}

func (s *Server) findContainer(id string) (container, error) {
	rec, err := s.findRecord(journal.KindContainer, id)
	if err != nil {
		return container{}, err
	}
	return decodeContainer(rec)
}

// containerName validates a container config and returns its name,
// k8s_<container>_<pod>_<namespace>_<uid>_<attempt>.
func containerName(cfg *runtimeapi.ContainerConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	if cfg == nil {
		return "", invalidf("config is required")
	}
	md := cfg.GetMetadata()
	if md == nil {
		return "", invalidf("config.metadata is required")
	}
	if err := checkNamePart("metadata.name", md.GetName()); err != nil {
		return "", err
	}
	if cfg.GetImage().GetImage() == "" {
		return "", invalidf("config.image.image is required")
	}
	if sc := cfg.GetLinux().GetSecurityContext(); sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
		return "", invalidf("config.linux.security_context.run_as_group needs run_as_user or run_as_username")
	}
	smd := sandbox.GetMetadata()
	return fmt.Sprintf("k8s_%s_%s_%s_%s_%d", md.GetName(), smd.GetName(), smd.GetNamespace(), smd.GetUid(), md.GetAttempt()), nil
}

// logPath is where conmon writes the container's CRI log: the sandbox's log directory
// joined with the container's log path, both as the kubelet gives them; "" when either is
// missing (no log is kept, as in CRI-O).
func logPath(sandbox *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (string, error) {
	dir, rel := sandbox.GetLogDirectory(), cfg.GetLogPath()
	if dir == "" || rel == "" {
		return "", nil
	}
	if !filepath.IsAbs(dir) {
		return "", invalidf("sandbox log_directory %q must be absolute", dir)
	}
	p := filepath.Join(dir, rel)
	if filepath.IsAbs(rel) || !strings.HasPrefix(p, filepath.Clean(dir)+"/") {
		return "", invalidf("log_path %q must stay inside the sandbox's log directory", rel)
	}
	return p, nil
}

// state derives the CRI state of a container from its markers and the runtime.
func (c container) state() runtimeapi.ContainerState {
	if _, done := c.rec.Marker(markerFinishedAt); done {
		return runtimeapi.ContainerState_CONTAINER_EXITED
	}
	if _, started := c.rec.Marker(markerStartedAt); started {
		return runtimeapi.ContainerState_CONTAINER_RUNNING
	}
	return runtimeapi.ContainerState_CONTAINER_CREATED
}

func markerTime(rec journal.Record, key string) int64 {
	v, ok := rec.Marker(key)
	if !ok {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0
	}
	return t.UnixNano()
}

func stringPtr(s string) *string { return &s }

// recordExit stores a container's exit in its record, once: from conmon's exit file, or
// as unknown when the runtime lost the container (a reboot). While the container runs it
// only records a start that the record lacks.
func (s *Server) recordExit(ctx context.Context, c container) error {
	if _, done := c.rec.Marker(markerFinishedAt); done {
		return nil
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return err
	}
	code, at, ok, err := rt.ExitStatus(c.rec.ID)
	if err != nil {
		return err
	}
	reason := "Completed"
	switch {
	case !ok:
		st, serr := rt.State(ctx, c.rec.ID)
		if serr == nil && st.Status != oci.StatusStopped {
			_, started := c.rec.Marker(markerStartedAt)
			if !started && (st.Status == oci.StatusRunning || st.Status == oci.StatusPaused) {
				// Started by a StartContainer that did not live to record it (the daemon
				// died between runc start and the marker): it runs, say so, or it would
				// stay CREATED and every StartContainer retry would fail.
				return s.journal.SetMarker(ctx, c.rec.ID, markerStartedAt, now())
			}
			return nil // still alive
		}
		if _, started := c.rec.Marker(markerStartedAt); !started && serr == nil {
			return nil // created, never started
		}
		code, at, reason = 255, time.Now(), "ContainerStatusUnknown"
	case rt.OOMKilled(c.rec.ID):
		// conmon saw the cgroup run out of memory: the kubelet reports this reason.
		reason = "OOMKilled"
	case code != 0:
		reason = "Error"
	}
	return s.journal.SetMarkers(ctx, c.rec.ID, map[string]*string{
		markerExitCode:   stringPtr(strconv.Itoa(code)),
		markerReason:     stringPtr(reason),
		markerFinishedAt: stringPtr(at.UTC().Format(time.RFC3339Nano)),
	})
}

func errContainerState(id string, state runtimeapi.ContainerState, want string) error {
	return status.Errorf(codes.FailedPrecondition, "container %s is %s, want %s", id, strings.TrimPrefix(state.String(), "CONTAINER_"), want)
}
