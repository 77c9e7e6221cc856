package main

import (
	"io"
	"strings"
	"testing"
)

// TestBenchWorkloads: an unknown workload is refused by name, before any endpoint is
// dialled; the idle workload refuses to run without a daemon to read.
func TestBenchWorkloads(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workload", "nope", "--endpoint", "unix:///nonexistent.sock"}, `unknown workload "nope"`},
		{[]string{"--workload", "idle", "--daemon-pid", "-1", "--endpoint", "unix:///nonexistent.sock"}, "PID"},
	} {
		cmd := newRootCommand()
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		cmd.SetArgs(tc.args)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("crijournal-bench %s = %v, want an error naming %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
