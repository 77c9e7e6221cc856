package server

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/nri"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage"
	"github.com/crijournal/crijournal/units"
)

// TestRecordObjectsGolden pins what the server keeps in a journal record (Record.Object)
// and reads back after a restart or an upgrade (testdata/golden/objects.json): a
// sandbox's and a container's object with every field set, their CRI configurations as
// protobuf, and every step kind and marker key the records carry. Each golden object is
// decoded as a restart decodes it and encoded back byte for byte. Changing the file
// (-update) means records an earlier release wrote are read otherwise: that needs a
// migration (migrations/), and a CHANGELOG entry.
func TestRecordObjectsGolden(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	const podID = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	podConfig := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web", Uid: "uid-1", Namespace: "default", Attempt: 1},
		Hostname: "web", LogDirectory: "/var/log/pods/default_web_uid-1", Labels: map[string]string{"app": "web"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/poduid-1",
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 1 << 28}},
	}
	ctrConfig := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "nginx"}, Image: &runtimeapi.ImageSpec{Image: "nginx:1"},
		Command: []string{"nginx"}, Args: []string{"-g", "daemon off;"}, LogPath: "nginx/0.log",
	}
	deterministic := func(m proto.Message) []byte {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	resources := deterministic(&runtimeapi.LinuxContainerResources{CpuQuota: 50000, CpuPeriod: 100000})
	objects := map[string]any{
		"sandbox": sandboxObject{Config: deterministic(podConfig), RuntimeHandler: "runc", HostNetwork: false,
			Namespaces: map[string]string{"net": "/var/run/crijournal/ns/netns/" + podID},
			IPs:        []string{"10.85.0.7", "fd00::7"}, CreatedAt: at,
			ResolvConf: "/run/crijournal/sandboxes/" + podID + "/resolv.conf", HostnameFile: "/run/crijournal/sandboxes/" + podID + "/hostname",
			Shm: "/run/crijournal/sandboxes/" + podID + "/shm"},
		"container": containerObject{Config: deterministic(ctrConfig), SandboxID: podID, Image: "nginx:1",
			ImageID: strings.Repeat("e", 64), ImageRef: "docker.io/library/nginx@sha256:" + strings.Repeat("f", 64),
			Handler: "runc", LogPath: "/var/log/pods/default_web_uid-1/nginx/0.log",
			Bundle: "/var/lib/crijournal/storage/overlay-containers/x/userdata", Rootfs: "/var/lib/crijournal/storage/overlay/x/merged",
			StopSig: "SIGQUIT", CreatedAt: at.Add(time.Second), User: &specs.User{UID: 101, GID: 101, AdditionalGids: []uint32{101}},
			Resources: resources, ImageVolumes: map[string]string{"/data": strings.Repeat("d", 64)}},
	}
	stored := map[string]json.RawMessage{}
	for name, obj := range objects {
		b, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		stored[name] = b
	}
	golden := map[string]any{
		"objects": stored,
		"step_kinds": []string{string(netns.StepPin), string(netns.StepAttach), string(netns.StepPause), string(netns.StepUserPin),
			string(netns.StepResolvConf), string(netns.StepHostname), string(netns.StepShm),
			string(storage.StepContainerStorage), string(storage.StepImageVolume), string(oci.StepConmon), string(oci.StepRuntimeContainer),
			string(nri.StepPod), string(nri.StepContainer), string(units.StepSlice), string(checkpoint.StepExport),
			string(checkpoint.StepImport), string(oci.StepRestore)},
		"markers": []string{markerStopped, markerNetworkStopped, markerPauseExited, markerStartedAt, markerFinishedAt,
			markerExitCode, markerReason, nri.MarkerStopped},
	}
	b, err := json.MarshalIndent(golden, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/objects.json", append(b, '\n'))

	// The golden objects, as an earlier release stored them, decode as a restart decodes
	// them, and encode back byte for byte.
	raw, err := os.ReadFile("testdata/golden/objects.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Objects map[string]json.RawMessage }
	if err := json.Unmarshal(raw, &file); err != nil {
		t.Fatal(err)
	}
	sb, err := decodeSandbox(recordWith(file.Objects["sandbox"]))
	if err != nil {
		t.Fatal(err)
	}
	c, err := decodeContainer(recordWith(file.Objects["container"]))
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(sb.config, podConfig) || !proto.Equal(c.config, ctrConfig) {
		t.Errorf("the golden objects' configurations decode to\n%v\n%v\nwant\n%v\n%v", sb.config, c.config, podConfig, ctrConfig)
	}
	for name, obj := range map[string]any{"sandbox": sb.obj, "container": c.obj} {
		again, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		var want bytes.Buffer
		if err := json.Compact(&want, file.Objects[name]); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, want.Bytes()) {
			t.Errorf("the golden %s object re-encoded differently:\ngot  %s\nwant %s", name, again, want.Bytes())
		}
	}
}

// recordWith is a created record holding object.
func recordWith(object json.RawMessage) journal.Record {
	return journal.Record{ID: strings.Repeat("1", 64), State: journal.StateCreated, Object: object}
}
