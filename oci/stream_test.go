package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"

	"github.com/crijournal/crijournal/internal/testenv"
)

// lockedBuffer is a bytes.Buffer for one writer and readers in other goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestExecStreams(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "60"}, nil)

	for _, tc := range []struct {
		name           string
		cmd            []string
		stdin          string // "" : none
		tty            bool
		resize         *remotecommand.TerminalSize
		code           int
		stdout, stderr string // stdout: a substring with a terminal
	}{
		{name: "output and code", cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, code: 3, stdout: "out\n", stderr: "err\n"},
		{name: "stdin", cmd: []string{"cat"}, stdin: "line one\nline two\n", stdout: "line one\nline two\n"},
		{name: "no stdin", cmd: []string{"cat"}, stdout: ""},
		// runc sets the command's terminal up (its size, no \r added to \n) after it has
		// started the command, and on a loaded node stty may fail until then: the
		// command waits (at most 10s) until its terminal has a size, not a fixed second.
		{name: "terminal", cmd: []string{"sh", "-c", `i=0; until s=$(stty size 2>/dev/null) && [ -n "$s" ] && [ "$s" != "0 0" ] || [ $i -ge 200 ]; do sleep 0.05; i=$((i+1)); done; tty; stty size; echo $TERM; exit 4`}, tty: true,
			resize: &remotecommand.TerminalSize{Width: 91, Height: 27}, code: 4, stdout: "/dev/pts/0\r\n27 91\r\nxterm\r\n"},
		{name: "terminal input", cmd: []string{"sh", "-c", "read line; echo got-$line"}, tty: true, stdin: "typed\n", stdout: "got-typed"},
		// Answered when the command exits, although a process it left in the
		// background holds the output open.
		{name: "background process", cmd: []string{"sh", "-c", "sleep 30 & echo fg; exit 5"}, code: 5, stdout: "fg\n"},
		{name: "terminal, background process", cmd: []string{"sh", "-c", "sleep 30 & echo fg; exit 5"}, tty: true, code: 5, stdout: "fg"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr lockedBuffer
			s := Streams{Stdout: &stdout, TTY: tc.tty}
			if !tc.tty {
				s.Stderr = &stderr
			}
			if tc.stdin != "" {
				s.Stdin = strings.NewReader(tc.stdin)
			}
			var resize chan remotecommand.TerminalSize
			if tc.resize != nil {
				resize = make(chan remotecommand.TerminalSize, 1)
				resize <- *tc.resize
				s.Resize = resize
			}
			start := time.Now()
			code, err := r.Exec(ctxb, c.id, tc.cmd, s)
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("Exec answered after %v", took)
			}
			if err != nil || code != tc.code {
				t.Fatalf("Exec = %d, %v; want %d (stdout %q, stderr %q)", code, err, tc.code, stdout.String(), stderr.String())
			}
			if tc.tty {
				if !strings.Contains(stdout.String(), tc.stdout) {
					t.Errorf("terminal output %q, want it to hold %q", stdout.String(), tc.stdout)
				}
				return
			}
			if stdout.String() != tc.stdout || stderr.String() != tc.stderr {
				t.Errorf("stdout %q, stderr %q; want %q, %q", stdout.String(), stderr.String(), tc.stdout, tc.stderr)
			}
		})
	}

	t.Run("runtime failure", func(t *testing.T) {
		if _, err := r.Exec(ctxb, c.id, []string{"/no/such/binary"}, Streams{Stdout: io.Discard}); err == nil || !strings.Contains(err.Error(), "/no/such/binary") {
			t.Fatalf("exec of a missing binary: %v, want the runtime's error", err)
		}
	})

	// The client goes away: the command and runc are killed and reaped.
	for _, tty := range []bool{false, true} {
		t.Run(fmt.Sprintf("cancelled tty=%v", tty), func(t *testing.T) {
			n, _ := strconv.ParseUint(randomHex(t, 2), 16, 32)
			marker := strconv.FormatUint(200000+n, 10)
			ctx, cancel := context.WithCancel(ctxb)
			done := make(chan error, 1)
			stdinR, stdinW := io.Pipe() // a client that never ends its input
			defer stdinW.Close()
			go func() {
				_, err := r.Exec(ctx, c.id, []string{"sleep", marker}, Streams{Stdin: stdinR, Stdout: io.Discard, TTY: tty})
				done <- err
			}()
			testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
				if len(sleepers(marker)) == 0 {
					return errors.New("the exec'd sleep is not running yet")
				}
				return nil
			})
			cancel()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Exec after cancel: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("Exec did not return after its context ended")
			}
			if left := sleepers(marker); len(left) > 0 {
				t.Fatalf("the exec'd command outlived its client: %v", left)
			}
			requireNoZombies(t)
		})
	}

	t.Run("stopped", func(t *testing.T) {
		stopped := startContainer(t, r, []string{"true"}, nil)
		testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
			if _, _, ok, _ := r.ExitStatus(stopped.id); !ok {
				return errors.New("no exit recorded")
			}
			return nil
		})
		if _, err := r.Exec(ctxb, stopped.id, []string{"true"}, Streams{Stdout: io.Discard}); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("exec in a stopped container: %v, want ErrNotRunning", err)
		}
		if err := r.Attach(ctxb, stopped.id, StdinNone, Streams{Stdout: io.Discard}); !errors.Is(err, ErrNotRunning) {
			t.Fatalf("attach to a stopped container: %v, want ErrNotRunning", err)
		}
	})
}

// sleepers returns the PIDs of processes running "sleep marker".
func sleepers(marker string) []string {
	entries, _ := os.ReadDir("/proc")
	var pids []string
	for _, e := range entries {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && string(b) == "sleep\x00"+marker+"\x00" {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

func TestAttach(t *testing.T) {
	r := newRuntime(t)
	withStdin := func(once, tty bool) func(*SpecInput) {
		return func(in *SpecInput) {
			in.Container.Stdin, in.Container.StdinOnce, in.Container.Tty = true, once, tty
		}
	}

	t.Run("stdin once", func(t *testing.T) {
		c := startContainer(t, r, []string{"cat"}, withStdin(true, false))
		var stdout lockedBuffer
		// The end of this session's input closes cat's stdin: cat exits, and with it
		// the session.
		err := r.Attach(ctxb, c.id, StdinOnce, Streams{Stdin: strings.NewReader("once\n"), Stdout: &stdout, Stderr: io.Discard})
		if err != nil || stdout.String() != "once\n" {
			t.Fatalf("Attach = %v, output %q; want once", err, stdout.String())
		}
		testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			if code, _, ok, _ := r.ExitStatus(c.id); !ok || code != 0 {
				return fmt.Errorf("exit recorded %v with code %d, want 0", ok, code)
			}
			return nil
		})
	})

	t.Run("stdin stays open", func(t *testing.T) {
		c := startContainer(t, r, []string{"cat"}, withStdin(false, false))
		for _, line := range []string{"first", "second"} {
			in, feed := io.Pipe()
			var stdout lockedBuffer
			done := make(chan error, 1)
			go func() {
				done <- r.Attach(ctxb, c.id, StdinOpen, Streams{Stdin: in, Stdout: &stdout, Stderr: io.Discard})
			}()
			// Fed until cat's output shows it: the session may not be connected yet.
			testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
				_, _ = io.WriteString(feed, line+"\n")
				time.Sleep(50 * time.Millisecond)
				if !strings.Contains(stdout.String(), line) {
					return fmt.Errorf("no %s in the output %q", line, stdout.String())
				}
				return nil
			})
			feed.Close()
			if err := <-done; err != nil {
				t.Fatalf("Attach after its input ended: %v", err)
			}
			if st, err := r.State(ctxb, c.id); err != nil || st.Status != StatusRunning {
				t.Fatalf("state after the session = %+v, %v; want running", st, err)
			}
		}
	})

	t.Run("terminal", func(t *testing.T) {
		c := startContainer(t, r, []string{"sh"}, withStdin(false, true))
		ctx, cancel := context.WithCancel(ctxb)
		in, feed := io.Pipe()
		defer feed.Close()
		resize := make(chan remotecommand.TerminalSize, 1)
		resize <- remotecommand.TerminalSize{Width: 101, Height: 31}
		var stdout lockedBuffer
		done := make(chan error, 1)
		go func() {
			done <- r.Attach(ctx, c.id, StdinOpen, Streams{Stdin: in, Stdout: &stdout, TTY: true, Resize: resize})
		}()
		testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
			_, _ = io.WriteString(feed, "stty size\n")
			time.Sleep(50 * time.Millisecond)
			if !strings.Contains(stdout.String(), "31 101") {
				return fmt.Errorf("no 31 101 in the terminal's output %q", stdout.String())
			}
			return nil
		})
		cancel() // the client goes away; the shell stays
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Attach after cancel: %v", err)
		}
		if st, err := r.State(ctxb, c.id); err != nil || st.Status != StatusRunning {
			t.Fatalf("state after the session = %+v, %v; want running", st, err)
		}
	})
}

func TestStdinModeOf(t *testing.T) {
	for _, tc := range []struct {
		cfg  *runtimeapi.ContainerConfig
		want StdinMode
	}{
		{&runtimeapi.ContainerConfig{}, StdinNone},
		{&runtimeapi.ContainerConfig{StdinOnce: true}, StdinNone},
		{&runtimeapi.ContainerConfig{Stdin: true}, StdinOpen},
		{&runtimeapi.ContainerConfig{Stdin: true, StdinOnce: true}, StdinOnce},
	} {
		if got := StdinModeOf(tc.cfg); got != tc.want {
			t.Errorf("StdinModeOf(stdin %v, once %v) = %v, want %v", tc.cfg.Stdin, tc.cfg.StdinOnce, got, tc.want)
		}
	}
}

func TestConmonStdinArgs(t *testing.T) {
	r := &Runtime{stateDir: "/run/x", root: "/run/x/runc", path: "/usr/sbin/runc"}
	for _, tc := range []struct {
		terminal bool
		stdin    StdinMode
		want     []string // the flags after the fixed ones
	}{
		{false, StdinNone, nil},
		{false, StdinOpen, []string{"-i", "--leave-stdin-open"}},
		{false, StdinOnce, []string{"-i"}},
		{true, StdinOpen, []string{"-t"}},
		{true, StdinNone, []string{"-t"}},
	} {
		args := r.conmonArgs("abc", "", tc.terminal, tc.stdin)
		tail := args[len(args)-len(tc.want):]
		if strings.Join(tail, " ") != strings.Join(tc.want, " ") || (len(tc.want) == 0 && strings.Contains(strings.Join(args, " "), " -i")) {
			t.Errorf("terminal %v, stdin %v: conmon %q, want it to end with %q", tc.terminal, tc.stdin, args, tc.want)
		}
		for _, a := range args {
			if (a == "-i" || a == "--leave-stdin-open") && (tc.terminal || tc.stdin == StdinNone) {
				t.Errorf("terminal %v, stdin %v: conmon %q has %s", tc.terminal, tc.stdin, args, a)
			}
		}
	}
}
