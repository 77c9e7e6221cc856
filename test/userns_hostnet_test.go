package test

import (
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// usernsHostNetScript prints the container's uid map, the network interfaces it sees and
// its /sys's type, then sleeps.
const usernsHostNetScript = `echo "uid_map: $(cat /proc/self/uid_map)"
echo "links: $(ls /sys/class/net | tr '\n' ' ')"
echo "proc-net: $(awk -F: 'NR>2 {gsub(/ /, "", $1); printf "%s ", $1}' /proc/net/dev)"
echo ready; sleep 3600`

// TestUsernsHostNetwork is issue 51's item 3: a pod with its own user namespace on the
// node's network (hostUsers: false with hostNetwork: true, KEP-5607; the kubelet sends it
// to a node whose runtime advertises RuntimeFeatures.user_namespaces_host_network, see
// k8s.io/kubernetes pkg/kubelet/kubelet_node_declared_features.go), as containerd (PR 12518)
// and CRI-O (PR 9634) run it. Status advertises the feature (the kernel probe passes here);
// crictl runs the pod and its container, which is in the user namespace (its uid map) and
// sees the node's interfaces, in /sys/class/net (the node's /sys, bound) and in
// /proc/net/dev; the pod gets no IP of its own. Removal leaves nothing.
func TestUsernsHostNetwork(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})

	st, err := d.cri(t).Status(t.Context(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetFeatures().GetUserNamespacesHostNetwork() {
		t.Fatalf("Status features %v: user_namespaces_host_network is false on a kernel that allows it", st.GetFeatures())
	}

	pod := d.editedPod(t, "userns-hostnet", func(cfg map[string]any) {
		maps.Copy(namespaceOptions(cfg), usernsOptions(runtimeapi.NamespaceMode_CONTAINER))
		namespaceOptions(cfg)["network"] = int(runtimeapi.NamespaceMode_NODE)
	})
	podID := d.mustRunp(t, pod)
	reaper.add(podID)
	if ps := d.inspectp(t, podID).Status.Network; ps != nil && ps.IP != "" {
		t.Errorf("a pod on the node's network has an IP of its own: %s", ps.IP)
	}
	d.pull(t, testImage)
	ctr := d.run(t, podID, containerConfig(t, "c", 0, []string{"sh", "-c", usernsHostNetScript}, func(cfg map[string]any) {
		withUserns(runtimeapi.NamespaceMode_CONTAINER)(cfg)
		namespaceOptions(cfg)["network"] = int(runtimeapi.NamespaceMode_NODE)
	}), pod)
	d.waitLog(t, ctr, "ready", 30*time.Second)
	logs := d.mustCrictl(t, "logs", ctr)

	if want := "uid_map: " + fmt.Sprintf("%10d %10d %10d", 0, usernsHostID, 65536); !strings.Contains(logs, want) {
		t.Errorf("the container is not in the pod's user namespace: its log lacks %q:\n%s", want, logs)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifaces {
		names = append(names, i.Name)
	}
	// The node's interfaces that last the test (others' veths come and go).
	for _, name := range []string{"lo", defaultRouteLink(t)} {
		if !slices.Contains(names, name) {
			t.Fatalf("the node has no interface %q: %v", name, names)
		}
		for _, where := range []string{"links: ", "proc-net: "} {
			line := logLine(logs, where)
			if !slices.Contains(strings.Fields(strings.TrimPrefix(line, where)), name) {
				t.Errorf("the container does not see the node's %s in %q", name, line)
			}
		}
	}
	d.removeCtr(t, ctr)
	d.removePod(t, podID)
	d.stopClean(t)
}

// defaultRouteLink returns the node's interface of its IPv4 default route.
func defaultRouteLink(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		if f := strings.Fields(line); len(f) > 2 && f[1] == "00000000" {
			return f[0]
		}
	}
	t.Fatalf("the node has no IPv4 default route:\n%s", b)
	return ""
}
