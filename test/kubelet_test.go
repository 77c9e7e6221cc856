package test

import (
	"encoding/json"
	"errors"
	"os"
	"path"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/crijournal/crijournal/oci"
)

// kubeletCgroups lists the cgroups of every hierarchy that a kubelet's QoS and node
// allocatable hierarchy would make (kubepods, kubepods.slice).
func kubeletCgroups() []string {
	var out []string
	for _, pattern := range []string{"/sys/fs/cgroup/kubepods*", "/sys/fs/cgroup/*/kubepods*"} {
		m, _ := filepath.Glob(pattern)
		out = append(out, m...)
	}
	slices.Sort(out)
	return out
}

// TestKubeletRunsStaticPod: a real kubelet (v1.37.2, standalone) runs a static pod on the
// daemon: the pod runs in the kubelet's view and the daemon lists its sandbox and
// container (in the daemon's default cgroup parent: the kubelet has no QoS cgroups);
// once the manifest is removed the kubelet stops and removes it, and nothing is left: no
// pod, no container, no cgroup, no journal record, no cgroup hierarchy of the kubelet's.
func TestKubeletRunsStaticPod(t *testing.T) {
	t.Parallel()
	cgroupsBefore := kubeletCgroups()
	d, _ := startContainerDaemon(t, daemonOptions{})
	k := startKubelet(t, d, kubeletOptions{})

	k.writeStaticPod(t, "web", staticPod("web", kubeletContainer{name: "sleeper"}))
	k.waitPodRunning(t, "web", time.Minute)
	p, _ := k.pod(t, "web")
	ctrID := p.Status.ContainerStatuses[0].runtimeID()

	// The daemon's view: one ready sandbox named as the kubelet names the pod, one
	// running container, the kubelet's.
	var sandboxes struct {
		Items []struct {
			ID       string `json:"id"`
			State    string `json:"state"`
			Metadata struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
				UID       string `json:"uid"`
			} `json:"metadata"`
		} `json:"items"`
	}
	out := d.mustCrictl(t, "pods", "-o", "json")
	if err := json.Unmarshal([]byte(out), &sandboxes); err != nil {
		t.Fatalf("crictl pods -o json: %v\n%s", err, out)
	}
	if len(sandboxes.Items) != 1 {
		t.Fatalf("crictl pods lists %d sandboxes, want the static pod's one:\n%s", len(sandboxes.Items), out)
	}
	sb := sandboxes.Items[0]
	if sb.State != "SANDBOX_READY" || sb.Metadata.Name != k.podName("web") || sb.Metadata.Namespace != "default" || sb.Metadata.UID != p.Metadata.UID {
		t.Errorf("crictl pods: sandbox %s %s %s/%s uid %s, want a ready %s/%s uid %s", sb.ID, sb.State,
			sb.Metadata.Namespace, sb.Metadata.Name, sb.Metadata.UID, "default", k.podName("web"), p.Metadata.UID)
	}
	d.requirePs(t, "the static pod running", ctrID)
	if st := d.requireCtrState(t, ctrID, "CONTAINER_RUNNING"); st.Status.Metadata.Name != "sleeper" {
		t.Errorf("crictl inspect %s: name %q, want sleeper", ctrID, st.Status.Metadata.Name)
	}
	// Without QoS cgroups the kubelet sends no cgroup_parent: the daemon's default.
	cgroup := d.memoryCgroup(t, ctrID)
	if want := path.Join(oci.DefaultCgroupParent, "crijournal-"+ctrID); cgroup != want {
		t.Errorf("the container's memory cgroup is %s, want %s", cgroup, want)
	}

	// Removed: the kubelet stops the pod at once, and removes the sandbox at its next
	// container garbage collection (every minute). The container it usually removes at
	// once, when its relist sees it exited; but when the pod's status no longer lists it by
	// then (seen in the emulated VM of make test-vm, where the kubelet is ten times slower),
	// the same garbage collection removes it: both within that minute and a half.
	k.removeStaticPod(t, "web")
	k.waitPodGone(t, "web", 30*time.Second)
	d.waitNoContainers(t, 90*time.Second)
	d.waitNoPods(t, 90*time.Second)
	d.requireNoContainerTrace(t, "after the kubelet removed the static pod")
	for _, id := range []string{sb.ID, ctrID} {
		for _, h := range cgroupHierarchies() {
			if dir := filepath.Join(h, oci.DefaultCgroupParent, "crijournal-"+id); !errors.Is(statErr(dir), os.ErrNotExist) {
				t.Errorf("left cgroup %s", dir)
			}
		}
	}
	if links := k.logLinks(); len(links) != 0 {
		t.Errorf("the kubelet left links to its containers' logs: %v", links)
	}

	k.stop(t)
	d.stopClean(t)
	if after := kubeletCgroups(); !slices.Equal(after, cgroupsBefore) {
		t.Errorf("kubelet cgroups before the test %v, after %v: want no hierarchy of the kubelet's", cgroupsBefore, after)
	}
}
