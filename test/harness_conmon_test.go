package test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Helpers of the conmon wrapper: a conmon that can be made slow, and the
// calls it got.

// conmonWrapper installs a wrapper of conmon in a directory of the test and
// returns its path, for daemonOptions.conmonPath. Each call logs its
// arguments to conmon-calls.log beside it, sleeps the duration in
// conmon-sleep beside it if that file exists (see slowConmon), then execs
// the real conmon (keeping the sync pipe, fd 3).
func conmonWrapper(t *testing.T) string {
	t.Helper()
	conmon, err := exec.LookPath("conmon")
	if err != nil {
		t.Skipf("conmon not found: %v", err)
	}
	dir := t.TempDir()
	script := `#!/bin/bash
# crijournal end-to-end tests: conmon, slowed on demand. The daemon's question of its
# version at start (log_size_max's default depends on it) is neither slowed nor counted.
if [ "$*" = --version ]; then
	exec ` + shellQuote(conmon) + ` --version
fi
dir=` + shellQuote(dir) + `
delay=
if [ -f "$dir/conmon-sleep" ]; then
	delay="$(cat "$dir/conmon-sleep")"
fi
echo "$*" >> "$dir/conmon-calls.log"
if [ -n "$delay" ]; then
	sleep "$delay"
fi
exec ` + shellQuote(conmon) + ` "$@"
`
	path := filepath.Join(dir, "conmon")
	writeFile(t, path, script, 0o755)
	return path
}

// slowConmon makes every later conmon start of the daemon (which must use
// conmonWrapper) sleep dur first; 0 makes it fast again.
func (d *daemon) slowConmon(t *testing.T, dur time.Duration) {
	t.Helper()
	if d.opts.conmonPath == "" {
		t.Fatal("slowConmon: the daemon does not use the conmon wrapper")
	}
	path := filepath.Join(filepath.Dir(d.opts.conmonPath), "conmon-sleep")
	if dur <= 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, strconv.FormatFloat(dur.Seconds(), 'f', 3, 64)+"\n", 0o644)
}

// conmonCalls returns how many times the conmon wrapper was started.
func (d *daemon) conmonCalls(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(filepath.Dir(d.opts.conmonPath), "conmon-calls.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// waitConmonCall waits until the conmon wrapper has been started n times.
func (d *daemon) waitConmonCall(t *testing.T, n int, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 20*time.Millisecond, func() error {
		if calls := d.conmonCalls(t); calls < n {
			return fmt.Errorf("conmon was not started %d times within %v (%d)", n, within, calls)
		}
		return nil
	})
}
