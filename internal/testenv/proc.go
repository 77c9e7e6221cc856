package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ProcState returns the state letter of process pid from /proc/<pid>/stat ("R", "S",
// "Z" for a zombie...), or "" when there is no such process.
func ProcState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ...: the state follows the last ')', as comm may hold one.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

// Alive reports whether process pid runs: it exists and is neither a zombie (exited,
// not yet reaped) nor dead.
func Alive(pid int) bool {
	st := ProcState(pid)
	return st != "" && st != "Z" && st != "X"
}

// IsZombie reports whether process pid has exited but not been reaped.
func IsZombie(pid int) bool { return ProcState(pid) == "Z" }

// ProcStatus returns the value of a field of /proc/<pid>/status ("State", "NoNewPrivs"...),
// trimmed, or "" when it cannot be read.
func ProcStatus(pid int, field string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// WaitGone fails the test unless process pid stops running (is gone or a zombie, see
// Alive) within within.
func WaitGone(t testing.TB, pid int, within time.Duration) {
	t.Helper()
	Eventually(t, within, 10*time.Millisecond, func() error {
		if Alive(pid) {
			return fmt.Errorf("process %d still runs (state %q)", pid, ProcStatus(pid, "State"))
		}
		return nil
	})
}
