// Package upgrade tests an upgrade from the previous release (issue 50): the previous
// release's daemon (CRIJOURNAL_PREV_BIN, which `make test-upgrade` builds from the commit
// in releases/previous) builds state on a private node, as containerd's
// integration/release_upgrade_linux_test.go does, plus the journal's own records; it is
// stopped (SIGTERM in one subtest, SIGKILL in the other) and this build's daemon
// (CRIJOURNAL_BIN) starts on the same state and must take every pod, container, image
// and record over. The tests skip unless CRIJOURNAL_PREV_BIN is set.
package upgrade

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// TestUpgrade runs the upgrade once per way of stopping the previous daemon, on two
// nodes at once.
func TestUpgrade(t *testing.T) {
	prev, cur := binaries(t)
	requirePrereqs(t)
	registry := storagetest.StartRegistry(t)
	storagetest.PushBusybox(t, registry, "upgrade/busybox", "1.0")
	storagetest.PushBusyboxStopSignal(t, registry, "upgrade/busybox-int", "1.0", "SIGINT")
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{
		{"SIGTERM", syscall.SIGTERM},
		{"SIGKILL", syscall.SIGKILL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			u := &upgrade{prev: prev, cur: cur, sig: tc.sig, n: newNode(t, registry)}
			u.buildState(t)
			u.stopPrevious(t)
			u.startCurrent(t)
			u.check(t)
		})
	}
}

// binaries returns the previous release's daemon and this build's, each with its pause
// program and sleeper beside it; it skips the test without CRIJOURNAL_PREV_BIN.
func binaries(t *testing.T) (prev, cur string) {
	t.Helper()
	prev = os.Getenv("CRIJOURNAL_PREV_BIN")
	if prev == "" {
		t.Skip("CRIJOURNAL_PREV_BIN is not set: make test-upgrade builds the previous release and sets it")
	}
	cur = os.Getenv("CRIJOURNAL_BIN")
	if cur == "" {
		t.Fatal("CRIJOURNAL_BIN is not set: make test-upgrade sets it to this build's daemon")
	}
	var versions []string
	for _, bin := range []string{prev, cur} {
		if !filepath.IsAbs(bin) {
			t.Fatalf("%s is not an absolute path", bin)
		}
		for _, f := range []string{bin, filepath.Join(filepath.Dir(bin), "crijournal-pause"), filepath.Join(filepath.Dir(bin), testenv.SleeperName)} {
			if st, err := os.Stat(f); err != nil || st.Mode()&0o111 == 0 {
				t.Fatalf("%s is missing or not executable (make test-upgrade builds it): %v", f, err)
			}
		}
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v\n%s", bin, err, out)
		}
		versions = append(versions, strings.TrimSpace(string(out)))
		t.Logf("%s:\n%s", bin, out)
	}
	if versions[0] == versions[1] {
		t.Fatalf("the previous release and this build say the same version:\n%s", versions[0])
	}
	return prev, cur
}

// requirePrereqs stops the test unless it runs as root with what the daemons need: it
// fails under CI=true, skips elsewhere.
func requirePrereqs(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "the upgrade test runs daemons")
	for _, tool := range []string{"crictl", "conmon", "ip", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Need(t, "the upgrade test needs %s in PATH (make deps)", tool)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniDir, plugin)); err != nil {
			testenv.Need(t, "the upgrade test needs the CNI plugin %s in %s (make deps)", plugin, cniDir)
		}
	}
	// A pod in a user namespace needs idmapped mounts: the project's runc, not Debian's.
	if _, err := os.Stat(config.BundledRunc); err != nil {
		testenv.Need(t, "the upgrade test's user namespace pod needs the project's runc %s (make deps)", config.BundledRunc)
	}
	storagetest.RequireBusybox(t)
}
