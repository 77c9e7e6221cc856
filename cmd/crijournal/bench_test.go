package main

import (
	"strings"
	"testing"
)

// TestBenchWorkloads: an unknown workload is refused by name, before any endpoint is
// dialled; the idle workload refuses to run without a daemon to read.
func TestBenchWorkloads(t *testing.T) {
	_, err := run(t, "bench", "--workload", "nope", "--endpoint", "unix:///nonexistent.sock")
	if err == nil || !strings.Contains(err.Error(), `unknown workload "nope"`) {
		t.Errorf("bench --workload nope = %v", err)
	}
	_, err = run(t, "bench", "--workload", "idle", "--daemon-pid", "-1", "--endpoint", "unix:///nonexistent.sock")
	if err == nil || !strings.Contains(err.Error(), "PID") {
		t.Errorf("bench --workload idle without a daemon PID = %v", err)
	}
}
