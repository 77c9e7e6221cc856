package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// scriptRuntime returns a Runtime whose binary is a shell script (body), for the rules
// about what counts as an answer; nothing is run but the script.
func scriptRuntime(t *testing.T, body string) (*Runtime, string) {
	t.Helper()
	requireRunc(t) // New looks up conmon; no container is run
	dir := shortTempDir(t)
	bin := filepath.Join(dir, "fake-runtime")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Handler: "fake", Path: bin, Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "s")})
	if err != nil {
		t.Fatal(err)
	}
	return r, bin
}

// TestStateNotFoundOnlyOnADefiniteAnswer: State reports ErrNotFound only when
// the runtime ran and said "does not exist", or when its state directory for the ID is
// absent; a binary that is missing or fails, or a query cut short, is an error that says
// nothing about the container.
func TestStateNotFoundOnlyOnADefiniteAnswer(t *testing.T) {
	const id = "abc"
	tests := []struct {
		name         string
		script       string
		stateDir     bool // the runtime's state directory <root>/<id> exists
		removeBinary bool
		ctxTimeout   time.Duration
		wantNotFound bool
	}{
		{name: "runtime says does not exist", script: `echo '{"level":"error","msg":"container does not exist"}' >&2; exit 1`,
			stateDir: true, wantNotFound: true},
		{name: "runtime fails, state dir present", script: `echo 'text file busy' >&2; exit 1`, stateDir: true},
		{name: "runtime fails, state dir absent", script: `echo 'text file busy' >&2; exit 1`, wantNotFound: true},
		{name: "binary missing, state dir present", removeBinary: true, stateDir: true},
		{name: "binary missing, state dir absent", removeBinary: true, wantNotFound: true},
		{name: "killed before its answer", script: `exec sleep 5`, stateDir: true},
		{name: "client cancels: the query goes on", script: `sleep 0.3; echo '{"id":"abc","pid":7,"status":"running"}'`,
			stateDir: true, ctxTimeout: 50 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, bin := scriptRuntime(t, tt.script)
			if tt.stateDir {
				if err := os.MkdirAll(filepath.Join(r.root, id), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if tt.removeBinary {
				os.Remove(bin)
			}
			ctx := context.Background()
			if tt.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.ctxTimeout)
				defer cancel()
			}
			if strings.HasPrefix(tt.name, "killed") {
				// A query that outlives its bound (queryTimeout in State) is killed:
				// whatever it would have said, that is no answer.
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				defer cancel()
				_, err := r.runtimeCmd(ctx, nil, "state", id)
				if err == nil || errors.Is(err, ErrNotFound) {
					t.Fatalf("runtime killed before its answer: %v, want an error that is not ErrNotFound", err)
				}
				return
			}
			st, err := r.State(ctx, id)
			if got := errors.Is(err, ErrNotFound); got != tt.wantNotFound {
				t.Fatalf("State = %+v, %v; ErrNotFound %v, want %v", st, err, got, tt.wantNotFound)
			}
			if tt.ctxTimeout > 0 && (err != nil || st.Status != StatusRunning) {
				t.Fatalf("State under a cancelled client = %+v, %v; want running (the query is not the client's)", st, err)
			}
		})
	}
}
