package oci

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestRunningWithoutTheRuntime: Running answers from conmon's pidfd, not from runc: it
// holds while the container runs even when the runtime binary is gone, through a new
// Runtime (a daemon restart) too; it stops holding once the exit file is there, and
// after Delete.
func TestRunningWithoutTheRuntime(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "echo ready; sleep 30"}, nil)
	waitLog(t, c, "stdout F ready")
	if !r.Running(c.id) {
		t.Fatal("Running = false for a running container")
	}
	// A runtime that fails every call: the answer cannot have come from it.
	fresh, err := New(Config{Handler: "runc", Path: "/bin/false", Root: r.root, StateDir: r.stateDir})
	if err != nil {
		t.Fatal(err)
	}
	if !fresh.Running(c.id) {
		t.Fatal("Running = false through a new Runtime (no pidfd kept) without a runtime binary")
	}
	if fresh.conmons.take(c.id) == nil {
		t.Fatal("the new Runtime kept no pidfd of conmon after the first answer")
	}
	defer fresh.conmons.forget(c.id, nil)
	if r.Running("unknown") || r.Running("../x") {
		t.Fatal("Running = true for an unknown or invalid ID")
	}

	if err := syscall.Kill(c.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if _, _, ok, err := r.ExitStatus(c.id); err != nil || !ok {
			return os.ErrNotExist
		}
		return nil
	})
	if r.Running(c.id) || fresh.Running(c.id) {
		t.Fatal("Running = true once the exit file is written")
	}
	if err := r.Delete(ctxb, c.id); err != nil {
		t.Fatal(err)
	}
	if r.conmons.take(c.id) != nil {
		t.Fatal("Delete left the pidfd of conmon kept")
	}
	if r.Running(c.id) {
		t.Fatal("Running = true after Delete")
	}
}

// TestRunningFalseWhenConmonDies: a conmon killed without writing an exit file makes
// Running false, so that the caller asks the runtime.
func TestRunningFalseWhenConmonDies(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "echo ready; sleep 30"}, nil)
	waitLog(t, c, "stdout F ready")
	pid := conmonPID(t, r, c.id)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		if r.Running(c.id) {
			return os.ErrExist
		}
		return nil
	})
	if _, _, ok, _ := r.ExitStatus(c.id); ok {
		t.Fatal("an exit file although conmon was killed")
	}
}
