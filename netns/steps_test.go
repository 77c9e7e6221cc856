package netns

import (
	"maps"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// TestStepArgsAreStable pins what each step constructor records as its undo's arguments:
// they are stored on disk, and an undo run after an upgrade reads them with the keys it
// knows. The attach step's arguments also read back as the attachment they came from.
func TestStepArgsAreStable(t *testing.T) {
	const dir, id = "/run/cj/ns", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	n := &Network{list: &libcni.NetworkConfigList{Name: "podnet", Bytes: []byte("{\n  \"name\": \"podnet\"\n}")}}
	pod := Pod{Name: "web", Namespace: "default", UID: "u-1"}
	attach := AttachStep(n, id, "/run/cj/ns/net/"+id, "eth0", pod, nil)
	ports := []PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}, {HostPort: 53, ContainerPort: 5353, Protocol: "udp", HostIP: "127.0.0.1"}}
	withPorts := AttachStep(n, id, "/run/cj/ns/net/"+id, "eth0", pod, ports)
	const podFiles = "/run/cj/sandboxes"
	for _, tc := range []struct {
		name string
		got  map[string]string
		want map[string]string
	}{
		{"pin", PinStep(dir, id, []Kind{IPC, Net, UTS}, "web").Args, map[string]string{
			"ipc": PinPath(dir, IPC, id), "net": PinPath(dir, Net, id), "uts": PinPath(dir, UTS, id)}},
		{"pause", PauseStep(dir, id, []Kind{IPC, Net, UTS}, PauseProgram{Path: "/usr/bin/crijournal-pause"}).Args, map[string]string{"path": PinPath(dir, PID, id)}},
		{"userns-pin", UserPinStep(dir, id, []Kind{IPC, Net, UTS}, "web", nil, nil, PauseProgram{Path: "/x"}).Args, map[string]string{
			"user": PinPath(dir, User, id), "pid": PinPath(dir, PID, id),
			"ipc": PinPath(dir, IPC, id), "net": PinPath(dir, Net, id), "uts": PinPath(dir, UTS, id)}},
		{"attach", attach.Args, map[string]string{
			"network": "podnet", "sandbox_id": id, "netns": "/run/cj/ns/net/" + id, "ifname": "eth0",
			"pod_name": "web", "pod_namespace": "default", "pod_uid": "u-1", "config": `{"name":"podnet"}`}},
		{"attach with ports", withPorts.Args, map[string]string{
			"network": "podnet", "sandbox_id": id, "netns": "/run/cj/ns/net/" + id, "ifname": "eth0",
			"pod_name": "web", "pod_namespace": "default", "pod_uid": "u-1", "config": `{"name":"podnet"}`,
			"port_mappings": `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":53,"containerPort":5353,"protocol":"udp","hostIP":"127.0.0.1"}]`}},
		{"resolv.conf", ResolvConfStep(podFiles, id, DNS{}, "/etc/resolv.conf").Args, map[string]string{"path": podFiles + "/" + id + "/resolv.conf"}},
		{"hostname", HostnameStep(podFiles, id, "web").Args, map[string]string{"path": podFiles + "/" + id + "/hostname"}},
		{"shm", ShmStep(podFiles, id).Args, map[string]string{"path": podFiles + "/" + id + "/shm"}},
	} {
		if !maps.Equal(tc.got, tc.want) {
			t.Errorf("%s step args %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	want := Attachment{Network: "podnet", SandboxID: id, NetNS: "/run/cj/ns/net/" + id, IfName: "eth0", Pod: pod, Config: `{"name":"podnet"}`}
	back, err := attachmentOf(attach.Args)
	if err != nil || !reflect.DeepEqual(back, want) {
		t.Errorf("attachment read back from its args: %+v, %v; want %+v", back, err, want)
	}
	if back.capabilityArgs() != nil {
		t.Errorf("capability args of an attachment without ports: %v, want none", back.capabilityArgs())
	}
	want.PortMappings = ports
	if back, err := attachmentOf(withPorts.Args); err != nil || !reflect.DeepEqual(back, want) {
		t.Errorf("attachment with ports read back from its args: %+v, %v; want %+v", back, err, want)
	}
	if _, err := attachmentOf(map[string]string{"sandbox_id": id, "port_mappings": "[{"}); err == nil {
		t.Error("attachment with undecodable port mappings read back without an error")
	}
	if got := back.cniArgs(); !maps.Equal(got, map[string]string{
		"K8S_POD_NAME": "web", "K8S_POD_NAMESPACE": "default", "K8S_POD_UID": "u-1", "K8S_POD_INFRA_CONTAINER_ID": id}) {
		t.Errorf("CNI args %v", got)
	}
	for kind, step := range map[string]string{"pin": string(PinStep(dir, id, []Kind{Net}, "").Kind),
		"pause": string(PauseStep(dir, id, nil, PauseProgram{Path: "/x"}).Kind), "attach": string(attach.Kind),
		"resolv": string(ResolvConfStep(podFiles, id, DNS{}, "").Kind), "hostname": string(HostnameStep(podFiles, id, "h").Kind),
		"shm": string(ShmStep(podFiles, id).Kind), "userns-pin": string(UserPinStep(dir, id, nil, "", nil, nil, PauseProgram{Path: "/x"}).Kind)} {
		if want := map[string]string{"pin": "netns-pin", "pause": "pause-process", "attach": "cni-attach",
			"resolv": "pod-resolv-conf", "hostname": "pod-hostname", "shm": "pod-shm", "userns-pin": "userns-pin"}[kind]; step != want {
			t.Errorf("%s step kind %q, want %q", kind, step, want)
		}
	}
}
