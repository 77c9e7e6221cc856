package test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// kubeletDefaultProcPaths are the lists the kubelet sends for procMount: Default
// (k8s.io/kubernetes v1.37 pkg/securitycontext/util.go, defaultMaskedPaths without the
// thermal_throttle directories it adds where the node has them, and
// defaultReadonlyPaths); for Unmasked it sends both empty.
var (
	kubeletDefaultMasked = []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap"}
	kubeletDefaultReadonly = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// withProcPaths sets the container's masked_paths and readonly_paths as the kubelet
// does for procMount (nil: none sent, the kubelet's Unmasked), keeping the namespace
// options that earlier options set.
func withProcPaths(masked, readonly []string) ctrOption {
	return func(cfg map[string]any) {
		sc, _ := linuxSection(cfg)["security_context"].(map[string]any)
		if sc == nil {
			sc = map[string]any{}
			linuxSection(cfg)["security_context"] = sc
		}
		sc["masked_paths"], sc["readonly_paths"] = masked, readonly
	}
}

// procMountScript prints the mounts over /proc's entries (masked and read-only paths
// are bind mounts there: /dev/null or a read-only bind of the path), then sleeps.
const procMountScript = `echo "proc-mounts: $(awk '$5 ~ "^/proc/." {printf "%s ", $5}' /proc/self/mountinfo)."
echo ready; sleep 3600`

// TestProcMountUnmasked is issue 51's item 1, through crictl: procMount as the kubelet
// encodes it (pkg/securitycontext's ConvertToRuntimeMaskedPaths and
// ConvertToRuntimeReadonlyPaths: Default sends the default lists, Unmasked both empty).
// In a pod with its own user namespace (hostUsers: false, the only pods the API lets ask
// for Unmasked: pkg/apis/core/validation "`hostUsers` must be false to use `Unmasked`"),
// Unmasked leaves /proc with no path masked or read-only: nothing is mounted over /proc's
// entries (/proc/kcore, /proc/keys, /proc/sys... are the kernel's); Default masks or makes
// read-only each of its /proc paths that this kernel has (runc skips the others; this
// VM's kernel has no /proc/kcore). In the
// node's user namespace empty lists (the kubelet never sends them there; crictl's
// configurations send none) keep the defaults.
func TestProcMountUnmasked(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	d.pull(t, testImage)
	userns := d.usernsContainerPod(t, "procmount-userns", runtimeapi.NamespaceMode_CONTAINER)
	usernsID := d.mustRunp(t, userns)
	reaper.add(usernsID)
	node := d.containerPod(t, "procmount-node", false)
	nodeID := d.mustRunp(t, node)
	cmd := []string{"sh", "-c", procMountScript}
	for _, tc := range []struct {
		name     string
		podID    string
		pod      string
		opts     []ctrOption
		unmasked bool
	}{
		{"unmasked-userns", usernsID, userns, []ctrOption{withUserns(runtimeapi.NamespaceMode_CONTAINER), withProcPaths(nil, nil)}, true},
		{"default-userns", usernsID, userns, []ctrOption{withUserns(runtimeapi.NamespaceMode_CONTAINER),
			withProcPaths(kubeletDefaultMasked, kubeletDefaultReadonly)}, false},
		{"empty-node-userns", nodeID, node, []ctrOption{withProcPaths(nil, nil)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := d.run(t, tc.podID, containerConfig(t, tc.name, 0, cmd, tc.opts...), tc.pod)
			defer d.removeCtr(t, id)
			d.waitLog(t, id, "ready", 30*time.Second)
			logs := d.mustCrictl(t, "logs", id)
			mounted := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(logLine(logs, "proc-mounts: "), "proc-mounts: "), "."))
			if tc.unmasked {
				if len(mounted) > 0 {
					t.Errorf("Unmasked: %v are masked or read-only in the container, want none", mounted)
				}
				return
			}
			var want []string
			for _, p := range append(slices.Clone(kubeletDefaultMasked), kubeletDefaultReadonly...) {
				if _, err := os.Stat(p); err == nil && strings.HasPrefix(p, "/proc/") {
					want = append(want, p)
				}
			}
			if len(want) < 5 {
				t.Fatalf("the node has only %v of the default /proc paths", want)
			}
			for _, p := range want {
				if !slices.Contains(mounted, p) {
					t.Errorf("Default: %s is neither masked nor read-only in the container (mounted over: %v)", p, mounted)
				}
			}
		})
	}
	d.removePod(t, usernsID)
	d.removePod(t, nodeID)
	d.stopClean(t)
}

// logLine returns the first line of logs that starts with prefix ("" when none).
func logLine(logs, prefix string) string {
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}
