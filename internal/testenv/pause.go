package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BuildPause builds the pause program (cmd/crijournal-pause) and its sleeper
// (cmd/crijournal-pause-sleep, see package pause) into dir, as the Makefile does (the
// program without cgo, the sleeper static with the system's C compiler), and returns the
// program's path. It runs the go command, which takes a second or two when cached, and cc.
func BuildPause(dir string) (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("build the pause program: %w", err)
	}
	out := filepath.Join(dir, "crijournal-pause")
	cmd := exec.Command(goCmd, "build", "-o", out, "github.com/crijournal/crijournal/cmd/crijournal-pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the pause program: %w\n%s", err, b)
	}
	// The sleeper's source is found the way the go command finds the module.
	gomod, err := exec.Command(goCmd, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("build the pause sleeper: go env GOMOD: %w", err)
	}
	src := filepath.Join(filepath.Dir(strings.TrimSpace(string(gomod))), "cmd", "crijournal-pause-sleep", "sleep.c")
	cmd = exec.Command("cc", "-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-o", filepath.Join(dir, SleeperName), src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the pause sleeper (make deps installs gcc and libc6-dev): %w\n%s", err, b)
	}
	return out, nil
}

// SleeperName is the file name of the pause program's sleeper (pause.SleeperName, which
// testenv cannot import).
const SleeperName = "crijournal-pause-sleep"

// The pause program RunWithPause built, or why it could not.
var (
	pauseProgram  string
	errPauseBuild = errors.New("the pause program is built by testenv.RunWithPause in TestMain")
)

// RunWithPause is the body of the TestMain of a package whose tests start pause
// processes: it builds the pause program into a temporary directory (see BuildPause),
// runs the tests, removes the directory and returns m.Run's status. The tests get the
// program from PauseProgram.
func RunWithPause(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pause-program-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	pauseProgram, errPauseBuild = BuildPause(dir)
	return m.Run()
}

// PauseProgram returns the pause program RunWithPause built, or fails the test with the
// reason it could not be built.
func PauseProgram(t testing.TB) string {
	t.Helper()
	if errPauseBuild != nil {
		t.Fatal(errPauseBuild)
	}
	return pauseProgram
}
