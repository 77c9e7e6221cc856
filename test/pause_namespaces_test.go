package test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPauseNamespaces runs pods that share their pid namespace, on the pod network and
// on the node's: the pause process, PID 1 of their containers, is in the network, IPC
// and UTS namespaces a container of the pod is in (the pod's pinned ones; the node's
// network and UTS for a pod on the node's network), so that /proc/1/net/dev in a
// container of a pod on the pod network lists the pod's interfaces (lo, eth0), not the
// node's; and it is in a cgroup namespace of its own, not the node's.
func TestPauseNamespaces(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	daemonNS := fmt.Sprintf("/proc/%d/ns/", d.pid(t))

	for _, tc := range []struct {
		name        string
		hostNetwork bool
	}{
		{"pod network", false},
		{"node network", true},
	} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			pod := d.editedPod(t, "pausens", func(cfg map[string]any) {
				opts := namespaceOptions(cfg)
				opts["pid"] = nsModePod
				if tc.hostNetwork {
					opts["network"] = int(runtimeapi.NamespaceMode_NODE)
				}
			})
			podID := d.mustRunp(t, pod)
			reaper.add(podID)
			pause := d.requirePause(t, podID)
			ctr := d.run(t, podID, containerConfig(t, "probe", 0, []string{"sleep", "3600"}, withPidMode(nsModePod)), pod)
			ctrInit := d.initPID(t, ctr)

			// Where the pause process's namespaces of each kind must be: the pod's pins,
			// or the node's (the daemon's) for those the pod shares with it.
			want := map[string]string{"net": d.netnsPin(podID), "ipc": d.nsDir + "/ipcns/" + podID, "uts": d.nsDir + "/utsns/" + podID}
			if tc.hostNetwork {
				want["net"], want["uts"] = daemonNS+"net", daemonNS+"uts"
			}
			for _, kind := range []string{"net", "ipc", "uts"} {
				got := nsInode(fmt.Sprintf("/proc/%d/ns/%s", pause, kind))
				if ctrNS := nsInode(fmt.Sprintf("/proc/%d/ns/%s", ctrInit, kind)); got == 0 || got != ctrNS {
					t.Errorf("pause process %d is in %s namespace %d, its container %s in %d: want the same", pause, kind, got, ctr, ctrNS)
				}
				if w := nsInode(want[kind]); got != w {
					t.Errorf("pause process %d is in %s namespace %d, want %d (%s)", pause, kind, got, w, want[kind])
				}
			}
			if got := nsInode(fmt.Sprintf("/proc/%d/ns/cgroup", pause)); got == 0 || got == nsInode(daemonNS+"cgroup") {
				t.Errorf("pause process %d is in the node's cgroup namespace (%d), want one of its own", pause, got)
			}

			if !tc.hostNetwork {
				// The node's interfaces change while other tests run: only the pod's
				// are known.
				out := d.execSync(t, ctr, "cat", "/proc/1/net/dev")
				if got := interfaceNames(out); !slices.Equal(got, []string{"eth0", "lo"}) {
					t.Errorf("/proc/1/net/dev in container %s lists %v, want the pod's [eth0 lo]:\n%s", ctr, got, out)
				}
			}
			d.removeCtr(t, ctr)
			d.removePod(t, podID)
			d.requireNoPause(t, podID, "after rmp", 10*time.Second)
		})
	}
	d.requireNoPidnsPins(t)
	d.assertNoLeaks(t)
	d.stopClean(t)
}

// interfaceNames returns the interface names, sorted, of a /proc/<pid>/net/dev: the
// lines after its two header lines, each "<name>: <counters>".
func interfaceNames(netDev string) []string {
	var names []string
	for i, line := range strings.Split(strings.TrimSpace(netDev), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && i >= 2 {
			names = append(names, strings.TrimSpace(name))
		}
	}
	slices.Sort(names)
	return names
}
