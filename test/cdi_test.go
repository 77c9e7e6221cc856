package test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CDI devices: a container that asks for a Container Device Interface device
// (CDI_devices, or the older cdi.k8s.io/ annotations) gets what the node's CDI
// spec file for it says: device nodes, environment variables and mounts. The
// spec files live in the directories of cdi_spec_dirs.

// cdiE2ESpec is a CDI spec of kind e2e.crijournal.io/test: device "null" is the
// host's /dev/null as /dev/cdi-null, with an environment variable and a
// read-only mount of dataDir at /cdi-data; every device of the kind also gets
// CDI_E2E_KIND.
func cdiE2ESpec(name, dataDir string) string {
	return `{
  "cdiVersion": "0.6.0",
  "kind": "e2e.crijournal.io/test",
  "devices": [{"name": "` + name + `", "containerEdits": {
    "env": ["CDI_E2E_DEVICE=` + name + `"],
    "deviceNodes": [{"path": "/dev/cdi-` + name + `", "hostPath": "/dev/null", "permissions": "rw"}],
    "mounts": [{"hostPath": "` + dataDir + `", "containerPath": "/cdi-data", "options": ["ro", "rbind"]}]
  }}],
  "containerEdits": {"env": ["CDI_E2E_KIND=test"]}
}`
}

func withCDIDevices(names ...string) ctrOption {
	return func(cfg map[string]any) {
		var devs []any
		for _, n := range names {
			devs = append(devs, map[string]any{"name": n})
		}
		cfg["CDI_devices"] = devs
	}
}

func withAnnotations(a map[string]string) ctrOption {
	return func(cfg map[string]any) { cfg["annotations"] = a }
}

// TestCDIDevices writes a CDI spec in a directory of cdi_spec_dirs (the other
// one is missing) and runs containers asking for its device, by CDI_devices
// and by annotation: each sees the device node (1:3, writable through the
// device cgroup), the environment and the mount. A spec written while the
// daemon runs is used by the next container. An unknown device is refused
// with InvalidArgument naming it, and nothing is left.
func TestCDIDevices(t *testing.T) {
	t.Parallel()
	specDir, dataDir := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(dataDir, "hello"), "from-cdi\n", 0o644)
	writeFile(t, filepath.Join(specDir, "e2e-test.json"), cdiE2ESpec("null", dataDir), 0o644)
	d, _ := startContainerDaemon(t, daemonOptions{cdiSpecDirs: []string{specDir, filepath.Join(t.TempDir(), "absent")}})

	pod := d.containerPod(t, "cdi", false)
	podID := d.mustRunp(t, pod)
	check := func(id, device string) {
		t.Helper()
		env := d.execSync(t, id, "env")
		for _, kv := range []string{"CDI_E2E_DEVICE=" + device, "CDI_E2E_KIND=test"} {
			if !strings.Contains("\n"+env+"\n", "\n"+kv+"\n") {
				t.Errorf("container %s: env lacks %s:\n%s", id, kv, env)
			}
		}
		// ls -l of a device: "crw-rw-rw- 1 root root 1, 3 <date> <path>".
		f := strings.Fields(d.execSync(t, id, "ls", "-l", "/dev/cdi-"+device))
		if len(f) < 6 || !strings.HasPrefix(f[0], "c") || f[4] != "1," || f[5] != "3" {
			t.Errorf("container %s: /dev/cdi-%s is %q, want the character device 1:3", id, device, f)
		}
		d.execSync(t, id, "sh", "-c", "echo written > /dev/cdi-"+device)
		if got := d.execSync(t, id, "cat", "/cdi-data/hello"); got != "from-cdi" {
			t.Errorf("container %s: /cdi-data/hello is %q, want the CDI mount's from-cdi", id, got)
		}
	}

	byField := d.run(t, podID, containerConfig(t, "cdi-field", 0, sleeper, withCDIDevices("e2e.crijournal.io/test=null")), pod)
	check(byField, "null")
	byAnnotation := d.run(t, podID, containerConfig(t, "cdi-annotation", 0, sleeper,
		withAnnotations(map[string]string{"cdi.k8s.io/e2e": "e2e.crijournal.io/test=null"})), pod)
	check(byAnnotation, "null")
	// Without a CDI device: nothing of it.
	plain := d.run(t, podID, containerConfig(t, "plain", 0, sleeper), pod)
	if env := d.execSync(t, plain, "env"); strings.Contains(env, "CDI_E2E") {
		t.Errorf("a container without CDI devices has CDI environment:\n%s", env)
	}

	// A spec file written now is read by the next creation.
	writeFile(t, filepath.Join(specDir, "e2e-late.json"),
		strings.Replace(cdiE2ESpec("late", dataDir), `"e2e.crijournal.io/test"`, `"e2e.crijournal.io/late"`, 1), 0o644)
	late := d.run(t, podID, containerConfig(t, "cdi-late", 0, sleeper, withCDIDevices("e2e.crijournal.io/late=late")), pod)
	check(late, "late")

	before := d.ps(t, true)
	for _, tc := range []struct {
		name string
		opt  ctrOption
	}{
		{"field", withCDIDevices("e2e.crijournal.io/test=null", "e2e.crijournal.io/test=gpu7")},
		{"annotation", withAnnotations(map[string]string{"cdi.k8s.io/e2e": "e2e.crijournal.io/test=gpu7"})},
	} {
		_, stderr, err := d.create(t, nil, podID, containerConfig(t, "cdi-unknown", 0, sleeper, tc.opt), pod)
		requireCode(t, "crictl create with an unknown CDI device by "+tc.name, err, stderr, "InvalidArgument")
		if !strings.Contains(stderr, "e2e.crijournal.io/test=gpu7") {
			t.Errorf("the refusal by %s does not name the unknown device:\n%s", tc.name, stderr)
		}
	}
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "cdi-unqualified", 0, sleeper, withCDIDevices("gpu7")), pod)
	requireCode(t, "crictl create with an unqualified CDI device name", err, stderr, "InvalidArgument")
	requireListed(t, "after the refused creates", "crictl ps -a -q", d.ps(t, true), before)

	if err := os.RemoveAll(specDir); err != nil {
		t.Fatal(err)
	}
	d.removePod(t, podID)
	d.stopClean(t)
}
