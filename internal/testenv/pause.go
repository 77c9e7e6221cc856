package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildPause builds the pause program (cmd/crijournal-pause) into dir, as the Makefile
// does (without cgo), and returns its path. It runs the go command, which takes a second
// or two when cached.
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
	return out, nil
}

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
