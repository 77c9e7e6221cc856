package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildPause builds the pause program (cmd/crijournal-pause) into dir, as the Makefile
// does (without cgo), and returns its path. Tests that start pause processes call it
// from TestMain: it runs the go command, which takes a second or two when cached.
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
