package test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestMountOptions checks Mount.mount_options (the kubelet's bindMountOptions): Status
// says the runtime honours them (features.mount_options), a host directory bound with
// noexec, nodev and nosuid has them inside the container and its program cannot be
// executed there, while the same directory bound without them runs it; an option that
// would lift a restriction (exec) is refused with InvalidArgument, and nothing is made.
func TestMountOptions(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := d.cri(t).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !st.GetFeatures().GetMountOptions() {
		t.Fatalf("Status features %v: want mount_options true", st.GetFeatures())
	}

	host := t.TempDir()
	writeFile(t, filepath.Join(host, "run.sh"), "#!/bin/sh\necho ran\n", 0o755)
	pod := d.containerPod(t, "mountopts", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "opts", 0, sleeper, withMounts(
		map[string]any{"container_path": "/noexec", "host_path": host, "mount_options": []string{"noexec", "nodev", "nosuid"}},
		map[string]any{"container_path": "/exec", "host_path": host},
	)), pod)

	if out := d.execSync(t, id, "/exec/run.sh"); out != "ran" {
		t.Fatalf("/exec/run.sh printed %q, want ran", out)
	}
	out := d.execSync(t, id, "sh", "-c", "/noexec/run.sh; echo rc=$?")
	if strings.Contains(out, "\nran") || strings.HasPrefix(out, "ran") || !strings.Contains(out, "rc=126") {
		t.Fatalf("/noexec/run.sh on the noexec mount: %q; want it refused (rc=126, permission denied)", out)
	}
	var opts string
	for line := range strings.Lines(d.execSync(t, id, "cat", "/proc/self/mountinfo")) {
		if f := strings.Fields(line); len(f) > 5 && f[4] == "/noexec" {
			opts = f[5]
		}
	}
	for _, want := range []string{"noexec", "nodev", "nosuid"} {
		if !strings.Contains(","+opts+",", ","+want+",") {
			t.Errorf("/noexec's mount options %q lack %s", opts, want)
		}
	}

	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "lifts", 0, sleeper, withMounts(
		map[string]any{"container_path": "/data", "host_path": host, "mount_options": []string{"exec"}},
	)), pod)
	requireCode(t, "crictl create with mount option exec", err, stderr, "InvalidArgument")
	if !strings.Contains(stderr, `exec\" is refused`) {
		t.Errorf("the refusal %q does not name the option", stderr)
	}
	if ids := d.ps(t, true); len(ids) != 1 || ids[0] != id {
		t.Errorf("crictl ps -a lists %v after the refusal, want only %s", ids, id)
	}
	if _, err := os.Stat(filepath.Join(host, "run.sh")); err != nil {
		t.Error(err)
	}
	d.removeCtr(t, id)
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.stopClean(t)
}
