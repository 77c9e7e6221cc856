package test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// usernsStaticPod is staticPod's manifest with hostUsers: false, the node's network when
// hostNetwork, and, for the containers named in procMount, that procMount in their
// securityContext.
func usernsStaticPod(t *testing.T, name string, hostNetwork bool, procMount map[string]string, containers ...kubeletContainer) string {
	t.Helper()
	var pod map[string]any
	if err := json.Unmarshal([]byte(staticPod(name, containers...)), &pod); err != nil {
		t.Fatal(err)
	}
	spec := pod["spec"].(map[string]any)
	spec["hostUsers"] = false
	if hostNetwork {
		spec["hostNetwork"] = true
	}
	for _, c := range spec["containers"].([]any) {
		c := c.(map[string]any)
		if pm, ok := procMount[c["name"].(string)]; ok {
			c["securityContext"] = map[string]any{"procMount": pm}
		}
	}
	b, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// untilTERM turns a script that ends in "sleep 3600" into one that exits 0 at SIGTERM (see
// stopsOnTERM).
func untilTERM(script string) []string {
	return []string{"sh", "-c", strings.Replace(script, "sleep 3600", "trap 'exit 0' TERM; sleep 3600 & wait", 1)}
}

// TestKubeletUsernsPods is issue 51's items 1 and 3 through the real kubelet (v1.37.2),
// with static pods with hostUsers: false:
//   - procMount: a container that asks for Unmasked, which the kubelet sends as
//     masked_paths and readonly_paths both empty (pkg/kubelet/kuberuntime/security_context.go,
//     securitycontext.ConvertToRuntimeMaskedPaths), gets a /proc with nothing mounted over
//     its entries; its neighbour, procMount Default (the kubelet's default lists), gets each
//     of those /proc paths the kernel has masked or read-only;
//   - hostNetwork: true (the kubelet's UserNamespacesHostNetworkSupport gate, alpha in
//     1.37, on here; its API validation refuses the pod without it): the pod runs, its
//     container is in the pod's user namespace and sees the node's interfaces.
func TestKubeletUsernsPods(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	k := startKubelet(t, d, kubeletOptions{config: map[string]any{
		"featureGates": map[string]bool{"UserNamespacesHostNetworkSupport": true},
	}})
	cmd := untilTERM(procMountScript)
	k.writeStaticPod(t, "procmount", usernsStaticPod(t, "procmount", false, map[string]string{"unmasked": "Unmasked", "default": "Default"},
		kubeletContainer{name: "unmasked", command: cmd}, kubeletContainer{name: "default", command: cmd}))
	k.writeStaticPod(t, "hostnet", usernsStaticPod(t, "hostnet", true, nil,
		kubeletContainer{name: "c", command: untilTERM(usernsHostNetScript)}))
	k.waitPodRunning(t, "procmount", 2*time.Minute)
	k.waitPodRunning(t, "hostnet", 2*time.Minute)

	// procMount.
	p, _ := k.pod(t, "procmount")
	var want []string
	for _, path := range append(slices.Clone(kubeletDefaultMasked), kubeletDefaultReadonly...) {
		if strings.HasPrefix(path, "/proc/") && statErr(path) == nil {
			want = append(want, path)
		}
	}
	if len(want) < 5 {
		t.Fatalf("the node has only %v of the default /proc paths", want)
	}
	if len(p.Status.ContainerStatuses) != 2 {
		t.Errorf("the pod has %d container statuses, want 2", len(p.Status.ContainerStatuses))
	}
	for _, cs := range p.Status.ContainerStatuses {
		id := cs.runtimeID()
		d.waitLog(t, id, "ready", 30*time.Second)
		line := logLine(d.mustCrictl(t, "logs", id), "proc-mounts: ")
		mounted := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(line, "proc-mounts: "), "."))
		switch cs.Name {
		case "unmasked":
			if len(mounted) > 0 {
				t.Errorf("procMount Unmasked: %v are masked or read-only in the container, want none", mounted)
			}
		case "default":
			for _, path := range want {
				if !slices.Contains(mounted, path) {
					t.Errorf("procMount Default: %s is neither masked nor read-only (mounted over: %v)", path, mounted)
				}
			}
		default:
			t.Errorf("unexpected container %q", cs.Name)
		}
	}

	// hostNetwork.
	h, _ := k.pod(t, "hostnet")
	id := h.Status.ContainerStatuses[0].runtimeID()
	d.waitLog(t, id, "ready", 30*time.Second)
	logs := d.mustCrictl(t, "logs", id)
	m := logLine(logs, "uid_map: ")
	if f := strings.Fields(strings.TrimPrefix(m, "uid_map: ")); len(f) != 3 || f[0] != "0" || f[1] == "0" {
		t.Errorf("the host-network pod's container is not in a user namespace of its own (uid map %q)", m)
	}
	for _, name := range []string{"lo", defaultRouteLink(t)} {
		for _, where := range []string{"links: ", "proc-net: "} {
			line := logLine(logs, where)
			if !slices.Contains(strings.Fields(strings.TrimPrefix(line, where)), name) {
				t.Errorf("the host-network pod's container does not see the node's %s in %q", name, line)
			}
		}
	}

	for _, name := range []string{"procmount", "hostnet"} {
		k.removeStaticPod(t, name)
		k.waitPodGone(t, name, 30*time.Second)
	}
	d.waitNoContainers(t, 90*time.Second)
	d.waitNoPods(t, 90*time.Second)
}
