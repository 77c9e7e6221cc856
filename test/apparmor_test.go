package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/oci"
)

// requireAppArmor stops a test of AppArmor confinement on a node whose kernel has
// AppArmor off (this machine): it skips, or fails where vmNodeEnv says the node has it.
func requireAppArmor(t *testing.T) {
	t.Helper()
	b, _ := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	_, err := os.Stat("/sys/kernel/security/apparmor/profiles")
	if strings.TrimSpace(string(b)) == "Y" && err == nil {
		return
	}
	if os.Getenv(vmNodeEnv) != "" {
		t.Fatalf("this node was to have AppArmor (%s is set): enabled=%q, securityfs: %v", vmNodeEnv, b, err)
	}
	t.Skip("needs a kernel with AppArmor: run it with `make test-vm`")
}

// appArmorLabel returns the AppArmor label of a process, as "name (mode)".
func appArmorLabel(t *testing.T, pid int) string {
	t.Helper()
	return readTrimmed(t, fmt.Sprintf("/proc/%d/attr/current", pid))
}

// TestAppArmorConfines: on a node with AppArmor, a container without a profile runs
// under crijournal-default, which the daemon loads, and which denies mount even to a
// container that has CAP_SYS_ADMIN (Unconfined shows that the capability alone would
// let it); a Localhost profile the node has loaded confines the container by its rules.
func TestAppArmorConfines(t *testing.T) {
	requireAppArmor(t)
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "apparmor", false)
	podID := d.mustRunp(t, pod)
	sysAdmin := withSecurity1("capabilities", map[string]any{"add_capabilities": []string{"SYS_ADMIN"}})
	mountTmpfs := []string{"sh", "-c", "mkdir -p /tmp/m && mount -t tmpfs t /tmp/m && echo mounted"}

	def := d.run(t, podID, containerConfig(t, "default", 0, sleeper, sysAdmin), pod)
	if got, want := appArmorLabel(t, d.initPID(t, def)), oci.DefaultAppArmorProfile+" (enforce)"; got != want {
		t.Errorf("a container without a profile runs as %q, want %q", got, want)
	}
	if _, stderr, err := d.crictl(t, append([]string{"exec", "--sync", def}, mountTmpfs...)...); err == nil || !strings.Contains(stderr, "denied") {
		t.Errorf("mount under %s: err %v, stderr %q; want permission denied", oci.DefaultAppArmorProfile, err, stderr)
	}

	unconfined := d.run(t, podID, containerConfig(t, "unconfined", 0, sleeper, sysAdmin,
		withSecurity1("apparmor", map[string]any{"profile_type": profileUnconfined})), pod)
	if got := appArmorLabel(t, d.initPID(t, unconfined)); got != "unconfined" {
		t.Errorf("an Unconfined container runs as %q", got)
	}
	if got := d.execSync(t, unconfined, mountTmpfs...); got != "mounted" {
		t.Errorf("mount with CAP_SYS_ADMIN and no profile printed %q, want mounted", got)
	}

	// A profile of the node's, loaded by the test and unloaded after it.
	name := "crijournal-e2e-" + randomHex(t, 4)
	profile := filepath.Join(t.TempDir(), name)
	writeFile(t, profile, "profile "+name+" flags=(attach_disconnected,mediate_deleted) {\n"+
		"  file, capability, network, mount, umount, pivot_root, signal, ptrace, unix,\n"+
		"  deny /etc/** w,\n}\n", 0o644)
	if out, err := exec.Command("apparmor_parser", "-r", profile).CombinedOutput(); err != nil {
		t.Fatalf("apparmor_parser -r: %v\n%s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("apparmor_parser", "-R", profile).Run() })
	local := d.run(t, podID, containerConfig(t, "localhost", 0, sleeper,
		withSecurity1("apparmor", map[string]any{"profile_type": profileLocalhost, "localhost_ref": name})), pod)
	if got, want := appArmorLabel(t, d.initPID(t, local)), name+" (enforce)"; got != want {
		t.Errorf("a container with Localhost %s runs as %q, want %q", name, got, want)
	}
	if _, stderr, err := d.crictl(t, "exec", "--sync", local, "touch", "/etc/denied"); err == nil || !strings.Contains(stderr, "denied") {
		t.Errorf("touch /etc/denied under %s: err %v, stderr %q; want permission denied", name, err, stderr)
	}
	if got := d.execSync(t, local, "sh", "-c", "touch /tmp/allowed && echo ok"); got != "ok" {
		t.Errorf("touch /tmp/allowed under %s printed %q, want ok", name, got)
	}
	for _, id := range []string{def, unconfined, local} {
		d.mustCrictl(t, "rm", "-f", id)
	}
	d.removePod(t, podID)
}
