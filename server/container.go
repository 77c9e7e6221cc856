package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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
	// ImageVolumes holds the image ID of each image volume by its container path.
	ImageVolumes map[string]string `json:"image_volumes,omitempty"`
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

// reasonUnknown is the reason of an exit recorded without conmon's word: the runtime
// definitely lost the container (a reboot), or conmon died without writing the exit file.
const reasonUnknown = "ContainerStatusUnknown"

// runtimeQueryTimeout bounds the runtime queries of recordExit, which run detached from
// the request: a client that gives up must not cut a query short (DESIGN §6, "absence of
// an answer is not evidence").
const runtimeQueryTimeout = 30 * time.Second

// recordExit stores a container's exit in its record, once: from conmon's exit file, or
// as unknown when the runtime definitely does not know the container (oci.ErrNotFound: a
// reboot) or has it stopped while conmon never wrote an exit file. While the container
// runs it only records a start that the record lacks. Any other failure to learn the
// container's state (the runtime binary missing or failing, a timeout) is returned and
// changes nothing: it says nothing about the container.
//
// A started container whose conmon lives and has written no exit file is running
// (oci.Runtime.Running): that is answered from a pidfd, without asking the runtime, so
// that the kubelet's polling forks nothing. The runtime is asked only when that cannot
// tell: a container never marked started, or one whose conmon is gone without an exit
// file.
func (s *Server) recordExit(ctx context.Context, c container) error {
	if _, done := c.rec.Marker(markerFinishedAt); done {
		return nil
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return err
	}
	_, started := c.rec.Marker(markerStartedAt)
	if started && rt.Running(c.rec.ID) {
		return nil
	}
	code, at, ok, err := rt.ExitStatus(c.rec.ID)
	if err != nil {
		return err
	}
	reason := ""
	if !ok {
		qctx, cancel := detached(ctx, runtimeQueryTimeout)
		defer cancel()
		st, serr := rt.State(qctx, c.rec.ID)
		switch {
		case errors.Is(serr, oci.ErrNotFound):
			// The runtime lost it (a reboot): whatever it was, it no longer runs.
			code, at, reason = 255, time.Now(), reasonUnknown
		case serr != nil:
			return fmt.Errorf("container %s: state unknown, nothing recorded: %w", c.rec.ID, serr)
		case st.Status != oci.StatusStopped:
			if !started && (st.Status == oci.StatusRunning || st.Status == oci.StatusPaused) {
				// Started by a StartContainer that did not live to record it (the daemon
				// died between runc start and the marker): it runs, say so, or it would
				// stay CREATED and every StartContainer retry would fail.
				return s.journal.SetMarker(c.rec.ID, markerStartedAt, nowMarker())
			}
			return nil // still alive
		case !started:
			return nil // created, never started
		default:
			// Stopped: runc says so as soon as the init process is dead, a moment before
			// conmon has reaped it and written the exit file. Wait for conmon.
			if code, at, ok, err = rt.AwaitExit(qctx, c.rec.ID); err != nil {
				return err
			}
			if !ok {
				code, at, reason = 255, time.Now(), reasonUnknown
			}
		}
	}
	switch {
	case reason != "":
	case rt.OOMKilled(c.rec.ID):
		// conmon saw the cgroup run out of memory: the kubelet reports this reason.
		reason = "OOMKilled"
	case code != 0:
		reason = "Error"
	default:
		reason = "Completed"
	}
	return s.journal.SetMarkers(c.rec.ID, map[string]*string{
		markerExitCode:   stringPtr(strconv.Itoa(code)),
		markerReason:     stringPtr(reason),
		markerFinishedAt: stringPtr(at.UTC().Format(time.RFC3339Nano)),
	})
}

func errContainerState(id string, state runtimeapi.ContainerState, want string) error {
	return newError(errWrongState, "container %s is %s, want %s", id, strings.TrimPrefix(state.String(), "CONTAINER_"), want)
}
