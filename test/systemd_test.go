package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// systemdTests are the tests TestSystemdDriver runs inside a systemd with the systemd cgroup
// driver: the container lifecycle (cgroups, a memory limit, stop and removal), stats, a
// pod resized on its slice (TestUpdatePodSandboxResources), the crash matrix rows of the
// steps that ask systemd for units (systemdCrashRows), and a real kubelet with
// cgroupDriver: systemd running a pod (TestKubeletSystemdDriver).
const systemdTests = "^(TestContainerLifecycle|TestStats|TestUpdatePodSandboxResources|TestCrashMatrix|TestKubeletSystemdDriver)$"

// systemdCrashRows are the crash matrix rows TestSystemdDriver runs: the pod slice's own
// step, and the steps whose units are scopes (the pause process's, the OCI container's with
// its conmon's).
const systemdCrashRows = `systemd-slice|pause-process/after-|oci-container/after-`

// TestSystemdDriver runs a selection of the end-to-end tests with cgroup_manager =
// "systemd" on a host whose PID 1 is not systemd: it boots Debian's systemd as PID 1 of
// namespaces of its own (test/systemd/up.sh), runs this test binary inside them
// (test/systemd/nse) with CRIJOURNAL_E2E_CGROUP_MANAGER=systemd, and powers it off. On a
// host that runs systemd, run the suite with that variable instead.
func TestSystemdDriver(t *testing.T) {
	if e2eSystemd() {
		t.Skip("the tests already run with the systemd driver")
	}
	if hostRunsSystemd() {
		t.Skipf("this host runs systemd: run the tests with %s=systemd for the systemd driver", envE2ECgroupManager)
	}
	requirePrereqs(t)
	for _, p := range []string{"/lib/systemd/systemd", "/usr/bin/dbus-daemon", "/usr/bin/systemctl", "/usr/bin/script"} {
		if !isExecutable(p) {
			testenv.Need(t, "the systemd driver's tests need %s (Debian: systemd, dbus, util-linux)", p)
		}
	}
	bin := daemonBinary(t)
	repo := repoDir(t)
	scripts := filepath.Join(repo, "test", "systemd")

	// What runs inside must be on the root file system outside /tmp and /run, which the
	// booted systemd's root (an overlay of /) hides: copies under /var/tmp.
	dir, err := os.MkdirTemp("/var/tmp", "cjsd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	copies := map[string]string{
		self: "e2e.test", bin: "crijournal",
		pauseBinary(bin): filepath.Base(pauseBinary(bin)), pauseSleeper(bin): filepath.Base(pauseSleeper(bin)),
	}
	// The kubelet, when there is one (requireKubelet inside says what is missing).
	var kubeletEnv []string
	if k := os.Getenv("CRIJOURNAL_KUBELET"); k != "" && isExecutable(k) {
		copies[k] = "kubelet"
		kubeletEnv = []string{"CRIJOURNAL_KUBELET=" + filepath.Join(dir, "kubelet")}
	}
	for from, to := range copies {
		testenv.CopyExecutable(t, from, filepath.Join(dir, to))
	}

	sd := filepath.Join(dir, "sd")
	cg := filepath.Base(dir)
	up := exec.Command(filepath.Join(scripts, "up.sh"), sd, cg)
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("boot systemd: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(filepath.Join(scripts, "down.sh"), sd, cg).CombinedOutput(); err != nil {
			t.Errorf("power off systemd: %v\n%s", err, out)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	args := []string{filepath.Join(dir, "e2e.test"), "-test.run", systemdTests, "-test.count=1", "-test.timeout=19m"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(scripts, "nse"), args...)
	cmd.Dir, _ = os.Getwd()
	cmd.Env = append(daemonEnv(nil), "SDTEST_DIR="+sd, "SDTEST_CGROUP="+cg, envE2ECgroupManager+"=systemd",
		envCrashRows+"="+systemdCrashRows, "CRIJOURNAL_BIN="+filepath.Join(dir, "crijournal"))
	cmd.Env = append(cmd.Env, kubeletEnv...)
	w := &testWriter{t: t}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		t.Errorf("the tests with the systemd driver: %v (their output is above)", err)
	}
}

// testWriter logs what is written to it, line by line.
type testWriter struct {
	t    *testing.T
	line strings.Builder
}

func (w *testWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b == '\n' {
			w.t.Log(w.line.String())
			w.line.Reset()
			continue
		}
		w.line.WriteByte(b)
	}
	return len(p), nil
}
