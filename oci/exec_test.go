package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

func TestExecSync(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, nil)

	stdout, stderr, code, err := r.ExecSync(ctxb, c.id, []string{"echo", "hi"}, 10*time.Second)
	if err != nil || code != 0 || string(stdout) != "hi\n" || len(stderr) != 0 {
		t.Fatalf("echo hi: stdout %q stderr %q code %d err %v", stdout, stderr, code, err)
	}
	_, stderr, code, err = r.ExecSync(ctxb, c.id, []string{"sh", "-c", "echo bad >&2; exit 3"}, 10*time.Second)
	if err != nil || code != 3 || string(stderr) != "bad\n" {
		t.Fatalf("exit 3: stderr %q code %d err %v", stderr, code, err)
	}
	if _, _, code, err := r.ExecSync(ctxb, c.id, []string{"sh", "-c", "echo x >/dev/null && echo y >/dev/zero"}, 10*time.Second); err != nil || code != 0 {
		t.Fatalf("the default devices are not usable: code %d err %v", code, err)
	}
	if _, _, _, err := r.ExecSync(ctxb, c.id, []string{"/no/such/binary"}, 10*time.Second); err == nil {
		t.Fatal("exec of a missing binary did not fail")
	}

	start := time.Now()
	_, _, code, err = r.ExecSync(ctxb, c.id, []string{"sleep", "10"}, time.Second)
	took := time.Since(start)
	if !errors.Is(err, ErrExecTimeout) || code != -1 {
		t.Fatalf("sleep 10 with a 1s timeout: code %d err %v, want ErrExecTimeout", code, err)
	}
	if took > 4*time.Second {
		t.Fatalf("timed-out exec returned after %s", took)
	}
	requireNoZombies(t)
	// The sleep is gone from the container too.
	for _, p := range descendants(c.pid) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); strings.Contains(string(b), "10") {
			t.Fatalf("timed-out command still runs as %d: %q", p, b)
		}
	}
	// The container survives.
	if st, err := r.State(ctxb, c.id); err != nil || st.Status != StatusRunning {
		t.Fatalf("state after timed-out exec = %+v, %v", st, err)
	}
	// A cancelled context also kills.
	ctx, cancel := context.WithTimeout(ctxb, 500*time.Millisecond)
	defer cancel()
	if _, _, _, err := r.ExecSync(ctx, c.id, []string{"sleep", "10"}, 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("exec with an expiring context: %v", err)
	}
	requireNoZombies(t)
}

// TestExecSyncAnswersAtExit: a command that leaves a process running in the background
// (an exec probe written as `sh -c 'daemon & ...; exit N'`) is answered when it exits,
// with its code and output, although the background process holds the output open; the
// background process goes on running in the container.
func TestExecSyncAnswersAtExit(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "60"}, nil)
	start := time.Now()
	stdout, _, code, err := r.ExecSync(ctxb, c.id, []string{"sh", "-c", "sleep 30 & echo fg; exit 4"}, 20*time.Second)
	took := time.Since(start)
	if err != nil || code != 4 || string(stdout) != "fg\n" {
		t.Fatalf("stdout %q code %d err %v, want \"fg\\n\", 4", stdout, code, err)
	}
	if took > execWaitDelay+3*time.Second {
		t.Fatalf("answered after %v: it waited for the background sleep", took)
	}
	var sleeping bool
	for _, p := range descendants(c.pid) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); strings.HasPrefix(string(b), "sleep\x0030") {
			sleeping = true
		}
	}
	if !sleeping {
		t.Error("the background sleep 30 does not run in the container any more")
	}
	requireNoZombies(t)
}

func TestExecSyncInStoppedContainer(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"true"}, nil)
	testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
		if _, _, ok, _ := r.ExitStatus(c.id); !ok {
			return errors.New("no exit recorded")
		}
		return nil
	})
	if _, _, _, err := r.ExecSync(ctxb, c.id, []string{"true"}, 5*time.Second); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("exec in a stopped container: %v, want ErrNotRunning", err)
	}
}

// TestExecSyncBoundsBothStreamsTogether: a command that writes 12 MiB to each stream
// gets maxExecOutput of the two together, so that the answer fits the kubelet's 16 MiB.
func TestExecSyncBoundsBothStreamsTogether(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "60"}, nil)
	stdout, stderr, code, err := r.ExecSync(ctxb, c.id,
		[]string{"sh", "-c", "dd if=/dev/zero bs=1048576 count=12 2>/dev/null; dd if=/dev/zero bs=1048576 count=12 >&2 2>/dev/null"}, 60*time.Second)
	if err != nil || code != 0 {
		t.Fatalf("code %d err %v", code, err)
	}
	// stdout comes first, but the last of it may still be in its pipe when stderr's
	// first bytes are read: the two share what is kept, not in a set order.
	if got := len(stdout) + len(stderr); got != maxExecOutput || len(stdout) == 0 || len(stderr) == 0 {
		t.Errorf("kept %d bytes of stdout and %d of stderr, %d in all; want %d in all, from both",
			len(stdout), len(stderr), got, maxExecOutput)
	}
	if maxExecOutput >= 16<<20 {
		t.Errorf("maxExecOutput %d leaves no room under the kubelet's 16 MiB", maxExecOutput)
	}
}

// TestCappedBuffersShareRoom: two buffers of one room keep maxExecOutput between them,
// whichever writes first, and never fail their writer.
func TestCappedBuffersShareRoom(t *testing.T) {
	room := &outputRoom{left: maxExecOutput}
	out, errs := &cappedBuffer{room: room}, &cappedBuffer{room: room}
	chunk := make([]byte, 1<<20)
	var wg sync.WaitGroup
	for _, b := range []*cappedBuffer{out, errs} {
		wg.Go(func() {
			for range 12 {
				if n, err := b.Write(chunk); n != len(chunk) || err != nil {
					t.Errorf("Write = %d, %v; want %d, nil", n, err, len(chunk))
				}
			}
		})
	}
	wg.Wait()
	if got := len(out.Bytes()) + len(errs.Bytes()); got != maxExecOutput {
		t.Errorf("kept %d + %d = %d bytes, want %d", len(out.Bytes()), len(errs.Bytes()), got, maxExecOutput)
	}
}
