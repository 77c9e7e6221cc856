//lint:file-ignore SA1019 the tests cover the deprecated profile strings older kubelets send.

package oci

import (
	"os"
	"strings"
	"testing"
)

// TestNodeConfinementHere: NodeConfinement reports AppArmor only where the kernel module
// is there, as Status shows it.
func TestNodeConfinementHere(t *testing.T) {
	c := NodeConfinement(false)
	if _, err := os.Stat("/sys/module/apparmor/parameters/enabled"); err != nil && c.AppArmor {
		t.Fatalf("AppArmor reported available without the module: %+v", c)
	}
	if !c.AppArmor && !strings.Contains(c.AppArmorNote, "not available") {
		t.Fatalf("note %q does not say AppArmor is unavailable", c.AppArmorNote)
	}
	if off := NodeConfinement(true); off.Seccomp || !strings.Contains(off.SeccompNote, "seccomp_unavailable") {
		t.Fatalf("seccomp_unavailable: %+v", off)
	}
}
