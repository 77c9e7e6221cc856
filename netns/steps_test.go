package netns

import (
	"maps"
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
	attach := AttachStep(n, id, "/run/cj/ns/net/"+id, "eth0", pod)
	for _, tc := range []struct {
		name string
		got  map[string]string
		want map[string]string
	}{
		{"pin", PinStep(dir, id, []Kind{IPC, Net, UTS}, "web").Args, map[string]string{
			"ipc": PinPath(dir, IPC, id), "net": PinPath(dir, Net, id), "uts": PinPath(dir, UTS, id)}},
		{"pause", PauseStep(dir, id, "/usr/bin/crijournal").Args, map[string]string{"path": PinPath(dir, PID, id)}},
		{"userns-pin", UserPinStep(dir, id, []Kind{IPC, Net, UTS}, "web", nil, nil, "/x").Args, map[string]string{
			"user": PinPath(dir, User, id), "pid": PinPath(dir, PID, id),
			"ipc": PinPath(dir, IPC, id), "net": PinPath(dir, Net, id), "uts": PinPath(dir, UTS, id)}},
		{"attach", attach.Args, map[string]string{
			"network": "podnet", "sandbox_id": id, "netns": "/run/cj/ns/net/" + id, "ifname": "eth0",
			"pod_name": "web", "pod_namespace": "default", "pod_uid": "u-1", "config": `{"name":"podnet"}`}},
	} {
		if !maps.Equal(tc.got, tc.want) {
			t.Errorf("%s step args %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	back := attachmentOf(attach.Args)
	want := Attachment{Network: "podnet", SandboxID: id, NetNS: "/run/cj/ns/net/" + id, IfName: "eth0", Pod: pod, Config: `{"name":"podnet"}`}
	if back != want {
		t.Errorf("attachment read back from its args: %+v, want %+v", back, want)
	}
	if got := back.cniArgs(); !maps.Equal(got, map[string]string{
		"K8S_POD_NAME": "web", "K8S_POD_NAMESPACE": "default", "K8S_POD_UID": "u-1", "K8S_POD_INFRA_CONTAINER_ID": id}) {
		t.Errorf("CNI args %v", got)
	}
	for kind, step := range map[string]string{"pin": string(PinStep(dir, id, []Kind{Net}, "").Kind),
		"pause": string(PauseStep(dir, id, "/x").Kind), "attach": string(attach.Kind),
		"userns-pin": string(UserPinStep(dir, id, nil, "", nil, nil, "/x").Kind)} {
		if want := map[string]string{"pin": "netns-pin", "pause": "pause-process", "attach": "cni-attach",
			"userns-pin": "userns-pin"}[kind]; step != want {
			t.Errorf("%s step kind %q, want %q", kind, step, want)
		}
	}
}
