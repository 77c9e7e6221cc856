package netns

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// requireRoot stops the test unless it runs as root (see testenv).
func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "netns tests pin namespaces and run CNI plugins")
}

// requirePlugins stops the test unless it runs as root and the reference CNI
// plugins (bridge, host-local) and the tools the tests use (nsenter, ip) are
// installed. It returns the plugin directory.
func requirePlugins(t *testing.T) string {
	t.Helper()
	requireRoot(t)
	for _, tool := range []string{"nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Need(t, "netns tests need %s (util-linux, iproute2)", tool)
		}
	}
	for _, dir := range []string{"/usr/lib/cni", "/opt/cni/bin"} {
		if isExecutable(filepath.Join(dir, "bridge")) && isExecutable(filepath.Join(dir, "host-local")) {
			return dir
		}
	}
	testenv.Need(t, "netns CNI tests need the bridge and host-local plugins in /usr/lib/cni or /opt/cni/bin (Debian: containernetworking-plugins)")
	return ""
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// randomHex returns n random bytes as hex.
func randomHex(t *testing.T, n int) string { return testenv.RandomHex(t, n) }

// newSandboxID returns a random sandbox ID shaped like the real ones.
func newSandboxID(t *testing.T) string { return randomHex(t, 32) }

// inode returns the inode number of the file at path (following links, so a
// /proc/*/ns/* link gives the namespace's inode).
func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	return st.Ino
}

// run runs a command and returns its trimmed output, failing the test on
// error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// pinTestNet pins a network namespace for a new sandbox under a temp dir and
// unpins it when the test ends.
func pinTestNet(t *testing.T) (sandboxID, path string) {
	t.Helper()
	sandboxID = newSandboxID(t)
	paths, err := Pin(context.Background(), t.TempDir(), sandboxID, []Kind{Net}, "")
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	t.Cleanup(func() {
		if err := Unpin(context.Background(), paths[Net]); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return sandboxID, paths[Net]
}
