package test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Seccomp and AppArmor, through crictl: RuntimeDefault is Moby's default profile
// adjusted to the container's capabilities, Localhost a profile file of the node,
// Unconfined and unset get no filter (as CRI-O by default), privileged containers
// get none whatever they ask for; a node configured without seccomp
// (seccomp_unavailable) refuses profiles. This kernel has no AppArmor: a named
// AppArmor profile is refused, RuntimeDefault runs, and crictl info says so.

// CRI profile types, as crictl reads them from JSON (numbers).
const (
	profileRuntimeDefault = int(runtimeapi.SecurityProfile_RuntimeDefault)
	profileUnconfined     = int(runtimeapi.SecurityProfile_Unconfined)
	profileLocalhost      = int(runtimeapi.SecurityProfile_Localhost)
)

// withSecurity1 sets one field of the container's linux.security_context.
func withSecurity1(key string, value any) ctrOption {
	return withSecurity(map[string]any{key: value})
}

// withSeccomp asks for a seccomp profile of the type (ref for Localhost).
func withSeccomp(typ int, ref string) ctrOption {
	return withSecurity1("seccomp", map[string]any{"profile_type": typ, "localhost_ref": ref})
}

// seccompMode is the container's "Seccomp:" line of /proc/self/status: 0
// unconfined, 2 filtered.
func (d *daemon) seccompMode(t *testing.T, id string) string {
	t.Helper()
	return strings.Join(strings.Fields(d.execSync(t, id, "busybox", "grep", "Seccomp:", "/proc/self/status")), " ")
}

// tryIn runs a shell command in the container and returns its output and exit
// status, as "<output> rc=<status>".
func (d *daemon) tryIn(t *testing.T, id, command string) string {
	t.Helper()
	return d.execSync(t, id, "sh", "-c", command+" 2>&1; echo rc=$?")
}

// blockMkdirProfile is a Localhost profile in the Docker format (as critest writes
// them) that denies mkdir.
const blockMkdirProfile = `{
  "defaultAction": "SCMP_ACT_ALLOW",
  "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]
}`

func TestSeccompProfiles(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "seccomp", false)
	podID := d.mustRunp(t, pod)
	profiles := t.TempDir()
	blockMkdir := filepath.Join(profiles, "block-mkdir.json")
	writeFile(t, blockMkdir, blockMkdirProfile, 0o600)

	// unshare -U asks for a new user namespace (unshare(2)), which the default
	// profile allows only with CAP_SYS_ADMIN; mkdir is what blockMkdir denies.
	// (The image links only a few commands to busybox; grep and unshare are
	// run as busybox applets.)
	const unshare, mkdir = "busybox unshare -U true", "mkdir /tmp/made"
	denied := "Operation not permitted"
	for i, tc := range []struct {
		name    string
		opts    []ctrOption
		mode    string            // the Seccomp: line
		outputs map[string]string // command -> what its output must hold
	}{
		{name: "unset", mode: "Seccomp: 0",
			outputs: map[string]string{unshare: "rc=0", mkdir: "rc=0"}},
		{name: "Unconfined", opts: []ctrOption{withSeccomp(profileUnconfined, "")}, mode: "Seccomp: 0",
			outputs: map[string]string{unshare: "rc=0"}},
		{name: "RuntimeDefault", opts: []ctrOption{withSeccomp(profileRuntimeDefault, "")}, mode: "Seccomp: 2",
			outputs: map[string]string{unshare: denied, mkdir: "rc=0"}},
		{name: "RuntimeDefault with SYS_ADMIN", opts: []ctrOption{withSeccomp(profileRuntimeDefault, ""),
			withSecurity1("capabilities", map[string]any{"add_capabilities": []string{"SYS_ADMIN"}})}, mode: "Seccomp: 2",
			outputs: map[string]string{unshare: "rc=0"}},
		{name: "deprecated runtime/default", opts: []ctrOption{withSecurity1("seccomp_profile_path", "runtime/default")}, mode: "Seccomp: 2",
			outputs: map[string]string{unshare: denied}},
		{name: "Localhost", opts: []ctrOption{withSeccomp(profileLocalhost, blockMkdir)}, mode: "Seccomp: 2",
			outputs: map[string]string{mkdir: denied, unshare: "rc=0"}},
		{name: "deprecated localhost/<path>", opts: []ctrOption{withSecurity1("seccomp_profile_path", "localhost/"+blockMkdir)}, mode: "Seccomp: 2",
			outputs: map[string]string{mkdir: denied}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := d.run(t, podID, containerConfig(t, fmt.Sprintf("sc-%d", i), 0, sleeper, tc.opts...), pod)
			d.requireCtrState(t, id, "CONTAINER_RUNNING")
			if got := d.seccompMode(t, id); got != tc.mode {
				t.Errorf("/proc/self/status says %q, want %q", got, tc.mode)
			}
			for cmd, want := range tc.outputs {
				if got := d.tryIn(t, id, cmd); !strings.Contains(got, want) {
					t.Errorf("%s printed %q, want %q", cmd, got, want)
				}
			}
			d.removeCtr(t, id)
		})
	}
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestSeccompPrivileged: a privileged container gets no filter, even one it names
// (as CRI-O and containerd; critest checks it).
func TestSeccompPrivileged(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "seccomp-priv", false)
	podID := d.mustRunp(t, pod)
	blockMkdir := filepath.Join(t.TempDir(), "block-mkdir.json")
	writeFile(t, blockMkdir, blockMkdirProfile, 0o600)

	id := d.run(t, podID, containerConfig(t, "priv", 0, sleeper,
		withSeccomp(profileLocalhost, blockMkdir), withSecurity1("privileged", true)), pod)
	if got := d.seccompMode(t, id); got != "Seccomp: 0" {
		t.Errorf("privileged container: /proc/self/status says %q, want Seccomp: 0", got)
	}
	if got := d.tryIn(t, id, "mkdir /tmp/made"); !strings.Contains(got, "rc=0") {
		t.Errorf("privileged container: mkdir printed %q", got)
	}
	d.removeCtr(t, id)
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestSeccompRefused: profiles that cannot apply are InvalidArgument naming what is
// wrong, and leave nothing behind.
func TestSeccompRefused(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "seccomp-bad", false)
	podID := d.mustRunp(t, pod)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.json")
	malformed := filepath.Join(dir, "malformed.json")
	writeFile(t, malformed, `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [`, 0o600)

	for _, tc := range []struct {
		name     string
		opts     []ctrOption
		contains []string
	}{
		{"missing Localhost profile", []ctrOption{withSeccomp(profileLocalhost, missing)}, []string{missing, "does not exist"}},
		{"malformed Localhost profile", []ctrOption{withSeccomp(profileLocalhost, malformed)}, []string{malformed}},
		{"deprecated localhost/ of a missing file", []ctrOption{withSecurity1("seccomp_profile_path", "localhost/"+missing)}, []string{missing}},
		{"AppArmor Localhost profile", []ctrOption{withSecurity1("apparmor", map[string]any{"profile_type": profileLocalhost, "localhost_ref": "my-profile"})},
			[]string{"my-profile", "AppArmor is not available on this node"}},
		{"deprecated AppArmor localhost/", []ctrOption{withSecurity1("apparmor_profile", "localhost/my-profile")},
			[]string{"AppArmor is not available on this node"}},
	} {
		_, stderr, err := d.create(t, nil, podID, containerConfig(t, "refused", 0, sleeper, tc.opts...), pod)
		requireCode(t, tc.name, err, stderr, "InvalidArgument")
		for _, want := range tc.contains {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s: the error does not say %q: %s", tc.name, want, strings.TrimSpace(stderr))
			}
		}
		t.Logf("%s: %s", tc.name, strings.TrimSpace(stderr))
		d.requireNoContainerTrace(t, "after "+tc.name)
	}

	// AppArmor RuntimeDefault runs as the node allows (here: no AppArmor).
	id := d.run(t, podID, containerConfig(t, "aa-default", 0, sleeper,
		withSecurity1("apparmor", map[string]any{"profile_type": profileRuntimeDefault})), pod)
	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	d.removeCtr(t, id)

	// crictl info says what the node offers.
	var conf struct {
		Seccomp      bool   `json:"seccomp"`
		AppArmor     bool   `json:"apparmor"`
		AppArmorNote string `json:"apparmorNote"`
	}
	mustDecode(t, "confinement", d.info(t)["confinement"], &conf)
	if !conf.Seccomp || conf.AppArmor || !strings.Contains(conf.AppArmorNote, "AppArmor is not available") {
		t.Errorf("crictl info confinement %+v, want seccomp and no AppArmor", conf)
	}
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestSeccompUnavailable: with seccomp_unavailable, a profile is refused with an
// error saying so, not run unconfined; Unconfined and unset still run.
func TestSeccompUnavailable(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{extraTOML: []string{"seccomp_unavailable = true"}})
	pod := d.containerPod(t, "no-seccomp", false)
	podID := d.mustRunp(t, pod)

	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "default", 0, sleeper, withSeccomp(profileRuntimeDefault, "")), pod)
	requireCode(t, "RuntimeDefault without seccomp", err, stderr, "InvalidArgument")
	if !strings.Contains(stderr, "no seccomp support") {
		t.Errorf("the error does not say the node has no seccomp: %s", strings.TrimSpace(stderr))
	}
	d.requireNoContainerTrace(t, "after the refused RuntimeDefault")

	for i, opts := range [][]ctrOption{{withSeccomp(profileUnconfined, "")}, nil} {
		id := d.run(t, podID, containerConfig(t, "runs", i, sleeper, opts...), pod)
		if got := d.seccompMode(t, id); got != "Seccomp: 0" {
			t.Errorf("/proc/self/status says %q, want Seccomp: 0", got)
		}
		d.removeCtr(t, id)
	}
	var conf struct {
		Seccomp     bool   `json:"seccomp"`
		SeccompNote string `json:"seccompNote"`
	}
	mustDecode(t, "confinement", d.info(t)["confinement"], &conf)
	if conf.Seccomp || !strings.Contains(conf.SeccompNote, "seccomp_unavailable") {
		t.Errorf("crictl info confinement %+v, want no seccomp", conf)
	}
	d.removePod(t, podID)
	d.stopClean(t)
}
