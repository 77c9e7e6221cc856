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

func TestFloorRuns(t *testing.T) {
	for _, tc := range []struct {
		name             string
		runs             int
		given, afterPods bool
		pods, want       int
	}{
		{"after the pods: as many runs as pods", 10, false, true, 20, 20},
		{"after the pods, --floor-runs given", 7, true, true, 20, 7},
		{"the floor alone", 10, false, false, 20, 10},
	} {
		if got := floorRuns(tc.runs, tc.given, tc.afterPods, tc.pods); got != tc.want {
			t.Errorf("%s: floorRuns = %d, want %d", tc.name, got, tc.want)
		}
	}
}
