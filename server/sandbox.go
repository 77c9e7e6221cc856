package server

import (
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// Markers of a sandbox record. They are stored on disk.
const (
	markerNetworkStopped = "network_stopped"
	markerStopped        = "stopped"
	// markerPauseExited is set when the pause process holding the pod's shared pid
	// namespace exits while the sandbox lives: no process can join it again.
	markerPauseExited = "pause_exited"
)

// sandboxObject is what the journal keeps of a created sandbox (Record.Object).
type sandboxObject struct {
	Config         []byte            `json:"config"` // PodSandboxConfig, protobuf
	RuntimeHandler string            `json:"runtime_handler,omitempty"`
	HostNetwork    bool              `json:"host_network,omitempty"`
	Namespaces     map[string]string `json:"namespaces,omitempty"` // kind -> pinned path
	IPs            []string          `json:"ips,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	// The pod's files its containers bind-mount (see podfiles.go); empty in records
	// written before they were made, whose containers get none.
	ResolvConf   string `json:"resolv_conf,omitempty"`
	HostnameFile string `json:"hostname_file,omitempty"`
	Shm          string `json:"shm,omitempty"` // the pod's tmpfs, or netns.HostShm for ipc NODE
}

// sandbox is a created sandbox as the server sees it.
type sandbox struct {
	rec    journal.Record
	obj    sandboxObject
	config *runtimeapi.PodSandboxConfig
}

func decodeSandbox(rec journal.Record) (sandbox, error) {
	sb := sandbox{rec: rec, config: &runtimeapi.PodSandboxConfig{}}
	err := decodeObject(rec, &sb.obj, &sb.obj.Config, sb.config)
	return sb, err
}

func (sb sandbox) state() runtimeapi.PodSandboxState {
	if _, gone := sb.rec.Marker(markerPauseExited); gone {
		return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	if _, stopped := sb.rec.Marker(markerStopped); stopped {
		return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return runtimeapi.PodSandboxState_SANDBOX_READY
}
