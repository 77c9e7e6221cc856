package netns

import (
	"context"
	"errors"
	"testing"

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
		path, pid, err := StartPause(ctx, dir, id, prog)
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
