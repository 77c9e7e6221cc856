package main

import (
	"bytes"
	"strings"
	"testing"
)

// run executes the command with args and returns what it printed.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// TestBenchWorkloads: an unknown workload is refused by name, before any endpoint is
// dialled; the idle workload refuses to run without a daemon to read.
func TestBenchWorkloads(t *testing.T) {
	_, err := run(t, "--workload", "nope", "--endpoint", "unix:///nonexistent.sock")
	if err == nil || !strings.Contains(err.Error(), `unknown workload "nope"`) {
		t.Errorf("crijournal-bench --workload nope = %v", err)
	}
	_, err = run(t, "--workload", "idle", "--daemon-pid", "-1", "--endpoint", "unix:///nonexistent.sock")
	if err == nil || !strings.Contains(err.Error(), "PID") {
		t.Errorf("crijournal-bench --workload idle without a daemon PID = %v", err)
	}
}
