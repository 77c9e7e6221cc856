package oci

import (
	"os"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestProbeUsernsHostNetwork runs the probe on this kernel: as root, a child in a new user
// namespace binds the node's /sys read-only (what a container on the node's network in
// its own user namespace gets as /sys), and the answer is kept.
func TestProbeUsernsHostNetwork(t *testing.T) {
	testenv.RequireRoot(t, "the user namespace probe creates a user namespace")
	if b, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && string(b) == "0\n" {
		testenv.Need(t, "user namespaces are disabled on this node (user.max_user_namespaces = 0): enable them")
	}
	if err := ProbeUsernsHostNetwork(); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if err := ProbeUsernsHostNetwork(); err != nil {
		t.Fatalf("second call: %v", err)
	}
}
