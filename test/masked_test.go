package test

import (
	"path/filepath"
	"testing"
)

// TestMaskedPaths: a container reads the host's thermal side channels empty, as moby and
// containerd 2.x mask them (issue 40): /proc/interrupts, and each CPU's thermal_throttle
// directory where the host has one.
func TestMaskedPaths(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "masked", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "c", 0, sleeper), pod)

	if hostFile(t, "/proc/interrupts") == "" {
		t.Fatalf("the host's /proc/interrupts is empty: nothing to mask")
	}
	if got := d.execSync(t, id, "cat", "/proc/interrupts"); got != "" {
		t.Errorf("a container reads /proc/interrupts:\n%s\nwant it masked (empty)", got)
	}
	throttle, err := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range throttle {
		if got := d.execSync(t, id, "ls", "-A", dir); got != "" {
			t.Errorf("a container lists %s: %q, want it masked (empty)", dir, got)
		}
	}
	d.removePod(t, podID)
	d.stopClean(t)
}
