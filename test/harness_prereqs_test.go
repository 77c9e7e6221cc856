package test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/internal/pause"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/server"
)

// Helpers of the tests' prerequisites: root, crictl, the tools and the CNI
// plugins, and the daemon binary (built once when CRIJOURNAL_BIN is not set).

// cniDir is where Debian installs the reference CNI plugins.
const cniDir = "/usr/lib/cni"

// goBuildTags are the build tags of the daemon (GOTAGS in the Makefile).
const goBuildTags = "containers_image_openpgp,exclude_graphdriver_btrfs,nri_no_wasm"

var (
	prereqOnce sync.Once
	prereqErr  string // empty when everything is there
	crictlPath string
)

// requirePrereqs stops the test unless it runs as root with crictl, the tools
// and the CNI plugins installed: it fails under CI=true, where they must be,
// and skips elsewhere.
func requirePrereqs(t *testing.T) {
	t.Helper()
	prereqOnce.Do(func() { prereqErr = checkPrereqs() })
	if prereqErr == "" {
		return
	}
	testenv.Need(t, "%s", prereqErr)
}

func checkPrereqs() string {
	if os.Geteuid() != 0 {
		return "end-to-end tests need root (run as root, e.g. sudo make test)"
	}
	crictlPath = findCrictl()
	if crictlPath == "" {
		return "end-to-end tests need crictl in PATH, /root/go/bin or /usr/local/bin (make deps installs it)"
	}
	for _, tool := range []string{"ip", "nsenter", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("end-to-end tests need %s in PATH (Debian: iproute2, util-linux, bash)", tool)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if !isExecutable(filepath.Join(cniDir, plugin)) {
			return fmt.Sprintf("end-to-end tests need the CNI plugin %s in %s (Debian: containernetworking-plugins)", plugin, cniDir)
		}
	}
	return ""
}

func findCrictl() string {
	if p, err := exec.LookPath("crictl"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
		return p
	}
	for _, p := range []string{"/root/go/bin/crictl", "/usr/local/bin/crictl"} {
		if isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

var (
	binOnce  sync.Once
	binPath  string
	binErr   error
	builtDir string // temp dir of a binary built by the harness, removed by TestMain
)

// daemonBinary returns the daemon to test: $CRIJOURNAL_BIN (set by make
// test), or one built from this module once per test binary run.
func daemonBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() { binPath, binErr = findOrBuildDaemon() })
	if binErr != nil {
		t.Fatalf("daemon binary: %v", binErr)
	}
	return binPath
}

func findOrBuildDaemon() (string, error) {
	if p := os.Getenv("CRIJOURNAL_BIN"); p != "" {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("CRIJOURNAL_BIN=%q is not an absolute path", p)
		}
		if !isExecutable(p) {
			return "", fmt.Errorf("CRIJOURNAL_BIN=%q is not an executable file (run make build)", p)
		}
		if pause := pauseBinary(p); !isExecutable(pause) {
			return "", fmt.Errorf("no pause program %s beside CRIJOURNAL_BIN (run make build)", pause)
		}
		if sleeper := pauseSleeper(p); !isExecutable(sleeper) {
			return "", fmt.Errorf("no pause sleeper %s beside CRIJOURNAL_BIN: the pause processes would stay Go programs (run make build, which compiles it with cc -static)", sleeper)
		}
		return p, nil
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
		if !isExecutable(gobin) {
			return "", errors.New("CRIJOURNAL_BIN is not set and no go command was found to build the daemon")
		}
	}
	out, err := exec.Command(gobin, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the crijournal module")
	}
	dir, err := os.MkdirTemp("", "cjbin")
	if err != nil {
		return "", err
	}
	builtDir = dir
	bin := filepath.Join(dir, "crijournal")
	cmd := exec.Command(gobin, "build", "-tags", goBuildTags, "-o", bin, "./cmd/crijournal")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/crijournal (CRIJOURNAL_BIN is not set): %v\n%s", err, out)
	}
	if _, err := testenv.BuildPause(dir); err != nil {
		return "", err
	}
	return bin, nil
}

// pauseBinary is the pause program the daemon at bin runs: the one beside it.
func pauseBinary(bin string) string {
	return filepath.Join(filepath.Dir(bin), server.PauseProgramName)
}

// pauseSleeper is the sleeper the pause program of the daemon at bin becomes once
// confined: the one beside it.
func pauseSleeper(bin string) string {
	return pause.SleeperPath(pauseBinary(bin))
}

func removeBuiltBinary() {
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
}

// nodeRunc returns the runc the test daemons run when their handler names no path: the
// project's runc (config.BundledRunc, which make deps builds) when it is installed, else
// runc in PATH. Tests that look at the runtime's state use the same binary.
func nodeRunc() (string, error) {
	if p := (config.Config{}).RuntimePath("runc"); p != "" {
		return p, nil
	}
	return exec.LookPath("runc")
}

// runcCmd is exec.Command of nodeRunc (runc, as named, when there is none: the command
// then fails to start, and the caller reports it).
func runcCmd(args ...string) *exec.Cmd {
	p, err := nodeRunc()
	if err != nil {
		p = "runc"
	}
	return exec.Command(p, args...)
}
