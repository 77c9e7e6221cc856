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
	for _, op := range FloorSteps {
		want := 4 // every run
		switch op {
		case OpRuncDelete, OpRuncKill, OpRuncRemove, OpPodDown:
			want = 2 // every second run ends one way, the others the other way
		}
		if s := r.Ops[op]; s.Count != want || s.P50 <= 0 {
			t.Errorf("%s: %+v, want %d timings", op, s, want)
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
