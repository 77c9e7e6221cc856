package server

import (
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
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

func errContainerState(id string, state runtimeapi.ContainerState, want string) error {
	return newError(errWrongState, "container %s is %s, want %s", id, strings.TrimPrefix(state.String(), "CONTAINER_"), want)
}
