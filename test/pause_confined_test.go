package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestPauseConfined runs pods that share their pid namespace, in the node's user
// namespace and in one of their own, with a container that adds SYS_PTRACE (as kubectl
// debug profiles do): through /proc/1 (the pause process) or any /proc/<pid> it can see,
// the container reaches nothing of the node's filesystem, here a file put in the node's
// /run. The pause process runs as an unprivileged user with no capability, no new
// privileges and a seccomp filter, in a cgroup of its own beside the pod's containers';
// once confined it is the sleeper (cmd/crijournal-pause-sleep), of at most 1 MiB of
// resident memory.
func TestPauseConfined(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	name := "crijournal-e2e-" + randomHex(t, 8)
	marker := filepath.Join("/run", name)
	if err := os.WriteFile(marker, []byte("the node's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(marker) })
	// Every /proc/<pid>/root and cwd the container sees, and their parents.
	probe := fmt.Sprintf(`for p in /proc/[0-9]*; do for d in root cwd root/.. cwd/..; do
  cat "$p/$d/run/%[1]s" 2>/dev/null && echo "LEAK $p/$d"; done; done
echo "pid1-root: $(ls -a1 /proc/1/root | tr '\n' ' ')"
echo "pid1-cwd: $(ls -a1 /proc/1/cwd | tr '\n' ' ')"
echo checked`, name)
	ptrace := withSecurity(map[string]any{"capabilities": map[string]any{"add_capabilities": []string{"SYS_PTRACE"}}})

	for _, tc := range []struct {
		name    string
		pod     func() string
		ns      ctrOption
		hostUID int // the pause process's user as the node sees it
	}{
		{"node-userns", func() string { return d.pidPod(t, "confined", nsModePod) }, withPidMode(nsModePod), 65535},
		{"own-userns", func() string { return d.usernsContainerPod(t, "confined-userns", runtimeapi.NamespaceMode_POD) },
			withUserns(runtimeapi.NamespaceMode_POD), usernsHostID + 65535},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod()
			podID := d.mustRunp(t, pod)
			reaper.add(podID)
			pid := d.requirePause(t, podID)
			uid := fmt.Sprint(tc.hostUID)
			for field, want := range map[string]string{
				"Uid": strings.Repeat(uid+"\t", 3) + uid, "CapEff": "0000000000000000", "CapPrm": "0000000000000000",
				"CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
			} {
				if got := testenv.ProcStatus(pid, field); got != want {
					t.Errorf("pause process %d: %s %q, want %q", pid, field, got, want)
				}
			}
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != pauseSleeper(daemonBinary(t)) {
				t.Errorf("pause process %d runs %q (%v), want the sleeper %s", pid, exe, err, pauseSleeper(daemonBinary(t)))
			}
			// Resident memory is no timing: the sleeper's is its pages mapped (at most its
			// file, about 0.7 MB) and a few of its own.
			rss := testenv.ProcStatus(pid, "VmRSS")
			if kb, err := strconv.Atoi(strings.TrimSuffix(rss, " kB")); err != nil || kb > 1024 {
				t.Errorf("pause process %d: VmRSS %q, want at most 1024 kB", pid, rss)
			} else {
				t.Logf("pause process %d: VmRSS %d kB", pid, kb)
			}
			cgroups, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			if err != nil || !strings.Contains(string(cgroups), "/crijournal-"+podID+"\n") {
				t.Errorf("pause process %d is not in a cgroup of its own (crijournal-%s): %q, %v", pid, podID, cgroups, err)
			}

			ctr := d.run(t, podID, containerConfig(t, "debug", 0, []string{"sleep", "3600"}, tc.ns, ptrace), pod)
			out := d.execSync(t, ctr, "sh", "-c", probe)
			t.Logf("probe in %s:\n%s", ctr, out)
			if !strings.Contains(out, "checked") || strings.Contains(out, "LEAK") || strings.Contains(out, "the node's") {
				t.Errorf("the container reached the node's %s through /proc:\n%s", marker, out)
			}
			if tc.name == "node-userns" {
				// With SYS_PTRACE over the pause process, its root and cwd are readable,
				// and empty.
				for _, want := range []string{"pid1-root: . .. \n", "pid1-cwd: . .. \n"} {
					if !strings.Contains(out+"\n", want) {
						t.Errorf("probe output lacks %q", want)
					}
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
