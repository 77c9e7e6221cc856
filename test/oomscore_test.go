package test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// oom_score_adj: a container gets the one it asks for, except that a daemon
// without CAP_SYS_RESOURCE cannot give it one below the daemon's own (the
// kernel refuses, and runc fails), so it is raised to the daemon's. A daemon
// with CAP_SYS_RESOURCE keeps the request.

func withOOMScoreAdj(adj int) ctrOption {
	return withResources(map[string]any{"oom_score_adj": adj})
}

// procNumber reads a number from a /proc file of a process: the whole file, or
// the hexadecimal value of a "Key:" line.
func procNumber(t *testing.T, pid int, file, key string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
	if err != nil {
		t.Fatal(err)
	}
	if key == "" {
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int64(n)
		}
	}
	t.Fatalf("no %s in /proc/%d/%s", key, pid, file)
	return 0
}

// TestOOMScoreAdj runs containers asking for a negative (Guaranteed pods ask
// for -997) and a positive oom_score_adj and reads what they got.
func TestOOMScoreAdj(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	d.mu.Lock()
	daemonPid := d.proc.Pid
	d.mu.Unlock()
	const capSysResource = 24
	sysResource := procNumber(t, daemonPid, "status", "CapEff")&(1<<capSysResource) != 0
	own := procNumber(t, daemonPid, "oom_score_adj", "")
	t.Logf("daemon: CAP_SYS_RESOURCE %v, oom_score_adj %d", sysResource, own)

	pod := d.containerPod(t, "oomscore", false)
	podID := d.mustRunp(t, pod)
	for _, requested := range []int64{-997, 500} {
		want := requested
		if !sysResource {
			want = max(requested, own)
		}
		id := d.run(t, podID, containerConfig(t, fmt.Sprintf("oom%d", requested), 0, sleeper, withOOMScoreAdj(int(requested))), pod)
		got, err := strconv.ParseInt(d.execSync(t, id, "cat", "/proc/1/oom_score_adj"), 10, 64)
		if err != nil || got != want {
			t.Errorf("container asking for oom_score_adj %d has %d (%v), want %d", requested, got, err, want)
		}
	}
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestPauseOOMScoreAdj runs a pod that shares its pid namespace under daemons started
// at several oom_score_adj values, and reads its pause process's: the one containerd and
// CRI-O give a pause container, -998, which a daemon without CAP_SYS_RESOURCE cannot
// set below its own (as for a container): there the pause process gets the daemon's.
// Under the systemd unit's -999 the pause process gets -998, not the daemon's -999;
// setting that row's daemon up takes CAP_SYS_RESOURCE.
func TestPauseOOMScoreAdj(t *testing.T) {
	t.Parallel()
	const capSysResource = 24
	ownSysResource := procNumber(t, os.Getpid(), "status", "CapEff")&(1<<capSysResource) != 0
	own := int(procNumber(t, os.Getpid(), "oom_score_adj", ""))
	for _, tc := range []struct {
		name   string
		daemon *int // the daemon's oom_score_adj; nil: the test process's
	}{
		{"inherited", nil},
		{"raised", intPtr(500)},
		{"systemd unit", intPtr(-999)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.daemon != nil && *tc.daemon < own && !ownSysResource {
				t.Skipf("starting the daemon at oom_score_adj %d, below this process's %d, needs CAP_SYS_RESOURCE, which this process lacks", *tc.daemon, own)
			}
			reaper := newPauseReaper(t)
			d := startDaemon(t, daemonOptions{oomScoreAdj: tc.daemon})
			daemonPid := d.pid(t)
			daemonAdj := procNumber(t, daemonPid, "oom_score_adj", "")
			if tc.daemon != nil && daemonAdj != int64(*tc.daemon) {
				t.Fatalf("the daemon runs at oom_score_adj %d, want the %d it was started at", daemonAdj, *tc.daemon)
			}
			sysResource := procNumber(t, daemonPid, "status", "CapEff")&(1<<capSysResource) != 0
			want := int64(-998)
			if !sysResource {
				want = max(want, daemonAdj)
			}
			t.Logf("daemon: oom_score_adj %d, CAP_SYS_RESOURCE %v: the pause process's should be %d", daemonAdj, sysResource, want)

			podID := d.mustRunp(t, d.pidPod(t, "pauseoom", nsModePod))
			reaper.add(podID)
			pause := d.requirePause(t, podID)
			if got := procNumber(t, pause, "oom_score_adj", ""); got != want {
				t.Errorf("pause process %d: oom_score_adj %d, want %d", pause, got, want)
			}
			d.removePod(t, podID)
			d.requireNoPause(t, podID, "after rmp", 10*time.Second)
			d.stopClean(t)
		})
	}
}

func intPtr(v int) *int { return &v }
