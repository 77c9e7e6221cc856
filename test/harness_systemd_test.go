package test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The systemd cgroup driver in the end-to-end tests. With CRIJOURNAL_E2E_CGROUP_MANAGER=systemd
// every daemon of the tests runs with cgroup_manager = "systemd", each pod in a slice of its
// own below the node's (podCgroupParent), the leak check also looks for units, and the crash
// matrix gains the rows of the systemd steps. That needs systemd as PID 1 of the tests' pid
// namespace: TestSystemdDriver (systemd_test.go) boots one (test/systemd) and runs a selection
// of the tests inside it so.

// envE2ECgroupManager chooses the cgroup driver of the tests' daemons: cgroupfs (default) or
// systemd.
const envE2ECgroupManager = "CRIJOURNAL_E2E_CGROUP_MANAGER"

// e2eCgroupManager is the cgroup driver of the tests' daemons.
func e2eCgroupManager() string {
	if m := os.Getenv(envE2ECgroupManager); m != "" {
		return m
	}
	return "cgroupfs"
}

// nodeSlice is the slice of the node whose directory is base, with the systemd driver:
// cje2e<base name>.slice, a top-level slice (a dash would nest it).
func nodeSlice(base string) string { return "cje2e" + filepath.Base(base) + ".slice" }

// isNodeSlice reports whether cgroupParent is a node slice's directory (/cje2e….slice).
func isNodeSlice(cgroupParent string) bool {
	return strings.HasPrefix(cgroupParent, "/cje2e") && strings.HasSuffix(cgroupParent, ".slice") &&
		!strings.Contains(cgroupParent[1:], "/")
}

// stopNodeSlice stops a node's slice and every unit in it (systemd made it when the
// daemon started the first pod slice below it; nothing stops it then), and makes systemd
// forget those of them that failed.
func stopNodeSlice(logf func(string, ...any), slice string) {
	if out, err := exec.Command("systemctl", "stop", slice).CombinedOutput(); err != nil {
		logf("cleanup: systemctl stop %s: %v %s", slice, err, out)
	}
	_ = exec.Command("systemctl", "reset-failed", strings.TrimSuffix(slice, ".slice")+"-*").Run()
}

// nodeSlices lists the node slices systemd has (with the systemd driver): the suite
// checks it leaves none (see nodeState).
func nodeSlices() []string {
	if !e2eSystemd() {
		return nil
	}
	out, err := exec.Command("systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", "cje2e*.slice").Output()
	if err != nil {
		return []string{"(systemctl list-units: " + err.Error() + ")"}
	}
	var slices []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.Contains(f[0], "-") {
			slices = append(slices, f[0])
		}
	}
	return slices
}

// e2eSystemd reports whether the tests' daemons use the systemd driver.
func e2eSystemd() bool { return e2eCgroupManager() == "systemd" }

// podCgroupParent is the cgroup_parent of a test pod with the given UID: the node's cgroup
// parent with cgroupfs; with systemd a slice of the pod's own below the node's, which
// systemd does not have, so that the daemon makes it (a systemd-slice step).
func (d *daemon) podCgroupParent(uid string) string {
	if !e2eSystemd() {
		return d.cgroupParent
	}
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return strings.TrimSuffix(d.cgroupParent, ".slice") + "-pod" + sanitizeUnit(uid) + ".slice"
}

// sanitizeUnit keeps the letters and digits of s (a dash would start another slice level).
func sanitizeUnit(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, s)
}

// cgroupRoot is the cgroup (relative to each hierarchy's root) under which the node's
// pods' cgroups are: the node's cgroup parent, or with systemd its slice's directory (a
// top-level slice: /<name>.slice).
func (d *daemon) cgroupRoot() string {
	if e2eSystemd() {
		return "/" + d.cgroupParent
	}
	return d.cgroupParent
}

// unitLeaks lists the systemd units the node's pods left (with the systemd driver): scopes
// crijournal-*.scope (of containers, pause processes and conmons) not named after a kept
// ID, and the pods' slices below the node's (any when nothing is kept; a slice is named
// after its pod, not its sandbox).
func (d *daemon) unitLeaks(t *testing.T, kept func(string) bool, anyKept bool) []string {
	t.Helper()
	if !e2eSystemd() {
		return nil
	}
	prefix := strings.TrimSuffix(d.cgroupParent, ".slice") + "-"
	out, err := exec.Command("systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager",
		"crijournal-*.scope", prefix+"*").CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl list-units: %v\n%s", err, out)
	}
	var leaks []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		unit := f[0]
		switch {
		case strings.HasSuffix(unit, ".slice") && !anyKept:
			leaks = append(leaks, "systemd unit "+unit+" ("+f[2]+" "+f[3]+")")
		case strings.HasSuffix(unit, ".scope") && !kept(unit) && d.ownsScope(unit):
			leaks = append(leaks, "systemd unit "+unit+" ("+f[2]+" "+f[3]+")")
		}
	}
	return leaks
}

// ownsScope reports whether a crijournal scope is this node's: in one of its pods' slices.
// (Scopes in the shared default slice, of pods without a cgroup_parent, cannot be told
// apart between the test daemons that share a systemd: the crash matrix's pods have one.)
// A unit systemd did not tell about after a few tries (a busy systemd) is reported.
func (d *daemon) ownsScope(unit string) bool {
	var out []byte
	var err error
	for range 5 {
		if out, err = exec.Command("systemctl", "show", "-P", "Slice", unit).Output(); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		return true
	}
	slice := strings.TrimSpace(string(out))
	return strings.HasPrefix(slice, strings.TrimSuffix(d.cgroupParent, ".slice")+"-")
}

// sliceCrashPod writes the pod configuration of the systemd-slice crash rows: podConfig's,
// in a slice of its own that systemd does not have.
func sliceCrashPod(t *testing.T, d *daemon) string {
	t.Helper()
	uid := randomHex(t, 16)
	return writePodJSON(t, "pod-crash-slice-"+uid[:8], map[string]any{
		"metadata": map[string]any{"name": "crash", "namespace": "e2e", "uid": uid, "attempt": 0},
		"hostname": "e2e",
		"labels":   map[string]string{"e2e": "crijournal"},
		"linux":    map[string]any{"cgroup_parent": d.podCgroupParent(uid)},
	})
}

// sliceTrigger is trigger for a pod in a slice of its own (sliceCrashPod).
func sliceTrigger(trigger *crashTrigger) *crashTrigger {
	u := *trigger
	u.variant = "systemd"
	u.how += " in a slice of its own"
	u.pod = sliceCrashPod
	return &u
}

// systemdCrashMatrix are the crash matrix's rows of the systemd driver's own step, the pod
// slice; the scopes are parts of the pause-process and oci-container steps, whose rows
// cover them when the matrix runs with the systemd driver.
var systemdCrashMatrix = []crashCase{
	{"sandbox-create", "sandbox-create/systemd-slice/before-intent", sliceTrigger(createSandboxTrigger)},
	{"sandbox-create", "sandbox-create/systemd-slice/after-intent", sliceTrigger(createSandboxTrigger)},
	{"sandbox-create", "sandbox-create/systemd-slice/after-action", sliceTrigger(createSandboxTrigger)},
	{"sandbox-create", "sandbox-create/pause-process/after-intent", sliceTrigger(createSandboxTrigger)},
	{"sandbox-create", "sandbox-create/pause-process/after-action", sliceTrigger(createSandboxTrigger)},
	{"sandbox-remove", "journal/remove/systemd-slice/before-undo", sliceTrigger(removeSandboxTrigger)},
	{"sandbox-remove", "journal/remove/systemd-slice/after-undo", sliceTrigger(removeSandboxTrigger)},
	{"sandbox-rollback", "journal/rollback/systemd-slice/before-undo", sliceTrigger(rollbackSandboxTrigger)},
	{"sandbox-rollback", "journal/rollback/systemd-slice/after-undo", sliceTrigger(rollbackSandboxTrigger)},
}

func init() {
	if e2eSystemd() {
		crashMatrix = append(crashMatrix, systemdCrashMatrix...)
	}
}

// hostRunsSystemd reports whether systemd is PID 1 of this pid namespace.
func hostRunsSystemd() bool {
	fi, err := os.Lstat("/run/systemd/system")
	return err == nil && fi.IsDir()
}

// repoDir is the repository's root (the tests run in its test directory).
func repoDir(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd)
}
