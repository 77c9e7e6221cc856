package bench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestFloor runs the real floor four times, two at a time (root, runc, busybox and the bridge plugin needed)
// and checks every step was timed each run and nothing is left on the host.
func TestFloor(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("needs root (runc, network namespaces, a bridge); not in -short")
	}
	for _, bin := range []string{"runc", "busybox"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s", bin)
		}
	}
	before, _ := filepath.Glob("/run/cjfloor-*") // a floor run by another process
	const bridge = "cjfloort0"
	r, err := Floor(context.Background(), FloorOptions{Runs: 4, Concurrency: 2, Bridge: bridge, Subnet: "10.253.1.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []Op{OpCNIAdd, OpRuncCreate, OpRuncStart, OpPodUp, OpCNIDel, OpRuncDelete, OpPodDown} {
		if s := r.Ops[op]; s.Count != 4 || s.P50 <= 0 {
			t.Errorf("%s: %+v, want 4 timings", op, s)
		}
	}
	if up := r.Ops[OpPodUp].Max; up < r.Ops[OpRuncCreate].Max {
		t.Errorf("pod up %v is less than its runc create %v", up, r.Ops[OpRuncCreate].Max)
	}
	if left, _ := filepath.Glob("/run/cjfloor-*"); len(left) > len(before) {
		t.Errorf("left on the host: %v (before the floor: %v)", left, before)
	}
	if _, err := netlink.LinkByName(bridge); err == nil {
		t.Errorf("bridge %s left on the host", bridge)
	}
}
