package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestPackages makes the .deb and .rpm of this tree (release.sh) at its VERSION and at a
// lower one from the same binaries, then has test-packages.sh install the lower, upgrade
// to this one with the configuration edited, remove and purge, in a private overlay root:
// every file where make install puts it, the unit enabled (.deb), the defaults put only
// where the node has none and removed only while unchanged, the edited configuration
// kept on upgrade and removal, /var/lib/crijournal untouched.
func TestPackages(t *testing.T) {
	testenv.RequireRoot(t, "the package tests mount an overlay root and chroot")
	for tool, pkg := range map[string]string{
		"dpkg": "dpkg", "rpm": "rpm", "unshare": "util-linux", "chroot": "coreutils",
		"systemctl": "systemd", "go": "Go (/usr/local/go)",
	} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Need(t, "%s missing: install %s (apt-get install rpm for rpm)", tool, pkg)
		}
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"crijournal", "crijournal-pause", "crijournal-pause-sleep"} {
		if _, err := os.Stat(filepath.Join(root, "bin", b)); err != nil {
			testenv.Need(t, "bin/%s missing: run make build first", b)
		}
	}
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	const lower = "0.0.1"
	if version == lower {
		t.Fatalf("VERSION is %s, the lower version the test upgrades from", lower)
	}

	dir := t.TempDir()
	nfpm := filepath.Join(dir, "nfpm")
	build := exec.Command("go", "build", "-o", nfpm, "github.com/goreleaser/nfpm/v2/cmd/nfpm")
	build.Dir = filepath.Join(root, "tools")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nfpm (tools/go.mod): %v\n%s", err, out)
	}
	for _, v := range []string{lower, version} {
		cmd := exec.Command(filepath.Join(root, "packaging", "release.sh"), v, filepath.Join(dir, v))
		cmd.Env = append(os.Environ(), "RELEASE_ANY_BINARY=1", "RELEASE_PACKAGES_ONLY=1", "NFPM="+nfpm)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("release.sh %s: %v\n%s", v, err, out)
		}
	}
	pkg := func(v, format string) string {
		name := "crijournal_" + v + "-1_amd64.deb"
		if format == "rpm" {
			name = "crijournal-" + v + "-1.x86_64.rpm"
		}
		return filepath.Join(dir, v, name)
	}
	cmd := exec.Command(filepath.Join(root, "packaging", "test-packages.sh"),
		pkg(version, "deb"), pkg(lower, "deb"), pkg(version, "rpm"), pkg(lower, "rpm"))
	out, err := cmd.CombinedOutput()
	t.Logf("test-packages.sh:\n%s", out)
	if err != nil {
		t.Fatalf("test-packages.sh: %v", err)
	}
	for _, want := range []string{"deb: ok", "rpm: ok"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("test-packages.sh did not say %q", want)
		}
	}
}
