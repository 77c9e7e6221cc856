package netns

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/pause"
	"github.com/crijournal/crijournal/internal/testenv"
)

// BenchmarkStartStopPause measures one pause process's life as a pod with a shared pid
// namespace pays it: StartPause (clone, exec, the program's confinement, the wait for it,
// the pin and the cgroup) and StopPause (kill, wait, unpin), then the cgroup's removal.
func BenchmarkStartStopPause(b *testing.B) {
	testenv.RequireRoot(b, "the pause benchmark starts pause processes")
	ctx := context.Background()
	dir := b.TempDir()
	prog := PauseProgram{Path: testenv.PauseProgram(b), UID: 65535, GID: 65535}
	for b.Loop() {
		id := testenv.RandomHex(b, 32)
		prog.Cgroup = testCgroupParent + "/" + id
		path, pid, err := StartPause(ctx, dir, id, nil, prog)
		if err != nil {
			b.Fatal(err)
		}
		if err := StopPause(ctx, path, pid); err != nil {
			b.Fatal(err)
		}
		if err := RemoveCgroup(prog.Cgroup); err != nil {
			b.Fatal(err)
		}
	}
	_ = RemoveCgroup(testCgroupParent)
}

// TestCgroupPathsRefused checks that the cgroup helpers refuse a path that would name
// the caller's own cgroup or leave the hierarchy, before they touch anything.
func TestCgroupPathsRefused(t *testing.T) {
	for _, p := range []string{"", "relative/x", "/a/../../b"} {
		if err := RemoveCgroup(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("RemoveCgroup(%q) = %v, want ErrInvalid", p, err)
		}
		if err := joinCgroup(p, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("joinCgroup(%q) = %v, want ErrInvalid", p, err)
		}
	}
}

// TestWaitReadyHonoursCancel: a wait for a pause process that never reports ends when
// its ctx is cancelled (no deadline), with the ctx's error, not after pauseReadyWait.
func TestWaitReadyHonoursCancel(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close() // the silent process's end, open for the whole wait
	s := &pauseStart{ready: r}
	defer s.close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if err := s.waitReady(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("waitReady = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > pauseReadyWait/2 {
		t.Fatalf("waitReady returned after %v, not at the cancel", d)
	}
}

// TestNewPauseStartSleeper checks how a pause process is told of its placed pipe, as fd
// 5, and of its sleeper: the file beside the program, as fd 6, named in its
// environment; without one, neither.
func TestNewPauseStartSleeper(t *testing.T) {
	dir := t.TempDir()
	program := filepath.Join(dir, "crijournal-pause")
	if err := os.WriteFile(program, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, withSleeper := range []bool{false, true} {
		if withSleeper {
			if err := os.WriteFile(pause.SleeperPath(program), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		s, err := newPauseStart(PauseProgram{Path: program, UID: 1, GID: 2}, "id", &syscall.SysProcAttr{})
		if err != nil {
			t.Fatal(err)
		}
		keys := []string{}
		for _, kv := range s.cmd.Env {
			k, _, _ := strings.Cut(kv, "=")
			keys = append(keys, k)
		}
		wantKeys, wantFiles := []string{pause.EnvUser, pause.EnvStarterMountNS, pause.EnvPlacedFD}, 3
		if !slices.Contains(s.cmd.Env, pause.EnvPlacedFD+"=5") {
			t.Errorf("environment %q, want %s=5", s.cmd.Env, pause.EnvPlacedFD)
		}
		if withSleeper {
			wantKeys, wantFiles = append(wantKeys, pause.EnvSleeperFD), 4
			if !slices.Contains(s.cmd.Env, pause.EnvSleeperFD+"=6") {
				t.Errorf("environment %q, want %s=6", s.cmd.Env, pause.EnvSleeperFD)
			}
			if got := s.cmd.ExtraFiles[3].Name(); got != pause.SleeperPath(program) {
				t.Errorf("fd 6 is %s, want the sleeper %s", got, pause.SleeperPath(program))
			}
		}
		if !slices.Equal(keys, wantKeys) || len(s.cmd.ExtraFiles) != wantFiles {
			t.Errorf("sleeper %v: environment %q and %d extra files, want %q and %d", withSleeper, keys, len(s.cmd.ExtraFiles), wantKeys, wantFiles)
		}
		s.close()
	}
}
