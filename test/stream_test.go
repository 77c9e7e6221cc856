package test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// The streaming tests: exec, attach and port-forward sessions with the real crictl,
// through the daemon's streaming server (package server/stream). Each starts its own
// container daemon; TestStreamExec's serves HTTPS (stream_tls_cert and stream_tls_key),
// the others plain HTTP on loopback.

// TestStreamExec runs crictl exec against a daemon whose streaming server uses TLS:
// output, stdin, the exit code, a terminal with resizes, a client that goes away (its
// command must not linger), and the CRI's validation of Exec, Attach and PortForward.
func TestStreamExec(t *testing.T) {
	t.Parallel()
	tlsDir := t.TempDir()
	cert, key, _ := testenv.SelfSignedCert(t, tlsDir)
	d, _ := startContainerDaemon(t, daemonOptions{extraTOML: []string{
		"stream_tls_cert = " + strconv.Quote(cert), "stream_tls_key = " + strconv.Quote(key),
	}})
	pod := d.containerPod(t, "exec", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "sleeper", 0, sleeper), pod)

	// The URL is HTTPS, and crictl verifies the server's certificate against it.
	resp, err := d.cri(t).Exec(context.Background(), &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}, Stdout: true})
	if err != nil || !strings.HasPrefix(resp.GetUrl(), "https://127.0.0.1:") {
		t.Fatalf("Exec = %v, %v; want an https://127.0.0.1 URL", resp, err)
	}
	verified := []string{"exec", "--tls-ca", cert, "--tls-cert", cert, "--tls-key", key, id, "echo", "verified"}
	if out := strings.TrimSpace(d.mustCrictl(t, verified...)); out != "verified" {
		t.Fatalf("crictl exec with the server's CA printed %q, want verified", out)
	}

	if out := strings.TrimSpace(d.mustCrictl(t, "exec", id, "echo", "x")); out != "x" {
		t.Fatalf("crictl exec %s echo x printed %q", id, out)
	}
	stdout, stderr, err := d.crictlInput(t, "from-stdin\nsecond line\n", "exec", "-i", id, "cat")
	if err != nil || stdout != "from-stdin\nsecond line\n" {
		t.Fatalf("crictl exec -i %s cat with two lines on stdin: %v, printed %q (stderr %s)", id, err, stdout, stderr)
	}
	stdout, stderr, err = d.crictl(t, "exec", id, "sh", "-c", "echo out; echo err >&2; exit 7")
	if err == nil || !strings.Contains(stderr, "command terminated with exit code 7") {
		t.Fatalf("crictl exec of exit 7: %v, stderr %q; want the exit code 7 reported", err, stderr)
	}
	if stdout != "out\n" || !strings.Contains(stderr, "err\n") {
		t.Fatalf("crictl exec of exit 7: stdout %q, stderr %q; want out and err on their own streams", stdout, stderr)
	}
	_, stderr, err = d.crictl(t, "exec", id, "no-such-command")
	if err == nil || !strings.Contains(stderr, "no-such-command") {
		t.Fatalf("crictl exec of a missing command: %v, stderr %q; want the runtime's error", err, stderr)
	}

	t.Run("tty", func(t *testing.T) {
		term := d.startUnderPty(t, 40, 120, "exec", "-it", id, "sh")
		// The first size reaches the server on a stream of its own, as the kubelet's
		// client sends it: a command typed at once may run before it has arrived, so
		// ask until it has (as for the resize below).
		term.retryUntil(t, "stty size\n", "40 120")
		term.write(t, "echo $TERM; tty\n")
		term.waitFor(t, "xterm", "/dev/pts/")
		if err := pty.Setsize(term.pty, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
			t.Fatal(err)
		}
		// crictl sends the new size when it gets SIGWINCH: ask until it has arrived.
		term.retryUntil(t, "stty size\n", "50 132")
		term.write(t, "exit 5\n")
		term.waitExit(t)
		term.waitFor(t, "exit code 5")
	})

	t.Run("client goes away", func(t *testing.T) {
		marker := randomSleep(t)
		cmd := d.crictlCommand("exec", id, "sleep", marker)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids := waitProcesses(t, "sleep "+marker, 1, 30*time.Second)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		waitProcesses(t, "sleep "+marker, 0, 15*time.Second)
		t.Logf("the exec'd sleep (pid %v) ended with its client", pids)
		d.requireCtrState(t, id, "CONTAINER_RUNNING")
	})

	t.Run("daemon stops", func(t *testing.T) {
		// Stopping the daemon ends its sessions: their commands are killed.
		marker := randomSleep(t)
		cmd := d.crictlCommand("exec", id, "sleep", marker)
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitProcesses(t, "sleep "+marker, 1, 30*time.Second)
		d.restart(t)
		waitProcesses(t, "sleep "+marker, 0, 15*time.Second)
		if err := waitCmd(cmd, 30*time.Second); err == nil || !strings.Contains(out.String(), "streaming server is stopping") {
			t.Errorf("crictl exec during the daemon's stop: %v; want an error saying the server stopped:\n%s", err, out.String())
		}
		d.requireCtrState(t, id, "CONTAINER_RUNNING")
	})

	t.Run("validation", func(t *testing.T) {
		cri := d.cri(t)
		ctx := context.Background()
		unknown := randomID(t)
		stopped := d.mustCreate(t, podID, containerConfig(t, "never-started", 0, sleeper), pod)
		for _, tc := range []struct {
			name string
			call func() error
			want codes.Code
		}{
			{"exec unknown", func() error {
				_, err := cri.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: unknown, Cmd: []string{"true"}, Stdout: true})
				return err
			}, codes.NotFound},
			{"exec not running", func() error {
				_, err := cri.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: stopped, Cmd: []string{"true"}, Stdout: true})
				return err
			}, codes.FailedPrecondition},
			{"exec without command", func() error {
				_, err := cri.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Stdout: true})
				return err
			}, codes.InvalidArgument},
			{"exec without streams", func() error {
				_, err := cri.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: id, Cmd: []string{"true"}})
				return err
			}, codes.InvalidArgument},
			{"attach unknown", func() error {
				_, err := cri.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: unknown, Stdout: true})
				return err
			}, codes.NotFound},
			{"attach not running", func() error {
				_, err := cri.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: stopped, Stdout: true})
				return err
			}, codes.FailedPrecondition},
			{"port-forward unknown", func() error {
				_, err := cri.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: unknown, Port: []int32{80}})
				return err
			}, codes.NotFound},
			{"port-forward bad port", func() error {
				_, err := cri.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{70000}})
				return err
			}, codes.InvalidArgument},
		} {
			if err := tc.call(); status.Code(err) != tc.want {
				t.Errorf("%s: %v, want code %s", tc.name, err, tc.want)
			}
		}
		d.mustCrictl(t, "stopp", podID)
		if _, err := cri.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: podID, Port: []int32{80}}); status.Code(err) != codes.FailedPrecondition {
			t.Errorf("port-forward to a stopped pod: %v, want FailedPrecondition", err)
		}
	})
	d.removePod(t, podID)
}

// TestStreamAttach attaches with crictl to containers' main processes: one with a
// terminal (input, output, resize; detaching leaves it running), one with stdin_once
// (the first session's end of input closes its stdin, so cat exits) and one with stdin
// that stays open across sessions.
func TestStreamAttach(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "attach", false)
	podID := d.mustRunp(t, pod)
	withStdin := func(once, tty bool) ctrOption {
		return func(cfg map[string]any) { cfg["stdin"], cfg["stdin_once"], cfg["tty"] = true, once, tty }
	}

	t.Run("tty", func(t *testing.T) {
		id := d.run(t, podID, containerConfig(t, "shell", 0, []string{"sh"}, withStdin(false, true)), pod)
		term := d.startUnderPty(t, 30, 100, "attach", "-i", "-t", id)
		// The typed line is echoed as typed; only the shell's output holds 42.
		term.retryUntil(t, "echo $((6*7))-attached\n", "42-attached")
		if err := pty.Setsize(term.pty, &pty.Winsize{Rows: 33, Cols: 77}); err != nil {
			t.Fatal(err)
		}
		term.retryUntil(t, "stty size\n", "33 77")
		term.kill(t)
		d.requireCtrState(t, id, "CONTAINER_RUNNING")
		// The shell still reads its terminal: a second session works.
		again := d.startUnderPty(t, 30, 100, "attach", "-i", "-t", id)
		again.retryUntil(t, "echo $((7*8))-again\n", "56-again")
		again.kill(t)
	})

	t.Run("stdin once", func(t *testing.T) {
		id := d.run(t, podID, containerConfig(t, "cat-once", 0, []string{"cat"}, withStdin(true, false)), pod)
		stdout, stderr, err := d.crictlInput(t, "only-session\n", "attach", "-i", id)
		if err != nil || !strings.Contains(stdout, "only-session") {
			t.Fatalf("crictl attach -i to a stdin_once cat: %v, printed %q (stderr %s)", err, stdout, stderr)
		}
		// conmon closed cat's stdin when the session's input ended, and cat exited. The
		// exit file is waited for before crictl asks: a status asked between runc's
		// "stopped" and conmon's exit file records 255 (issue 10's first defect).
		exitFile := filepath.Join(d.ociStateDir, "exits", id)
		testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, testenv.Until("conmon to record cat's exit", func() bool { _, err := os.Stat(exitFile); return err == nil }))
		d.requireExited(t, id, 0)
	})

	t.Run("stdin stays open", func(t *testing.T) {
		id := d.run(t, podID, containerConfig(t, "cat-open", 0, []string{"cat"}, withStdin(false, false)), pod)
		for _, line := range []string{"first-session", "second-session"} {
			cmd := d.crictlCommand("attach", "-i", id)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			// Retyped until cat's output shows it: the session may not be set up yet.
			testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, testenv.Until(fmt.Sprintf("cat to echo %s through crictl attach", line), func() bool {
				_, _ = io.WriteString(in, line+"\n")
				time.Sleep(100 * time.Millisecond)
				return strings.Contains(out.String(), line)
			}))
			in.Close()
			// The end of the client's input ends its session, not the container's stdin.
			if err := waitCmd(cmd, 20*time.Second); err != nil {
				t.Fatalf("crictl attach -i after its stdin ended: %v\n%s", err, out.String())
			}
			d.requireCtrState(t, id, "CONTAINER_RUNNING")
		}
	})
	d.removePod(t, podID)
}

// TestStreamPortForward forwards local ports with crictl port-forward to servers in a
// pod's network namespace (two ports, concurrent connections, a refused port) and in a
// pod on the host's network.
func TestStreamPortForward(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})

	t.Run("pod network", func(t *testing.T) {
		pod := d.containerPod(t, "forward", false)
		podID := d.mustRunp(t, pod)
		d.run(t, podID, containerConfig(t, "web", 0, webServers("pod-8080", "127.0.0.1:8080", "pod-8081", "8081")), pod)
		local := freePorts(t, 3)
		pf := d.startPortForward(t, podID, fmt.Sprintf("%d:8080", local[0]), fmt.Sprintf("%d:8081", local[1]), fmt.Sprintf("%d:8082", local[2]))
		waitHTTP(t, local[0], "pod-8080")
		requireHTTP(t, local[1], "pod-8081")

		// Concurrent connections on both ports, through the one session.
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for i := range 40 {
			port, want := local[i%2], []string{"pod-8080", "pod-8081"}[i%2]
			wg.Go(func() {
				if body, err := httpGet(port); err != nil || body != want {
					errs <- fmt.Errorf("GET on %d: %q, %v; want %q", port, body, err, want)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}

		// A port nothing listens on: the connection fails at once, and crictl reports an
		// error. Which one depends on a race in the client: the session writes the
		// refusal and resets the connection's streams, which crictl may see while it
		// is still creating them ("Stream reset"); usually it prints the refusal and
		// exits.
		if body, err := httpGet(local[2]); err == nil {
			t.Fatalf("GET through a forward to a refused port answered %q", body)
		}
		testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, testenv.Until("crictl port-forward to report the refused port", func() bool {
			out := pf.out.String()
			return strings.Contains(out, "connection refused") || strings.Contains(out, "Stream reset")
		}))
		pf.stop(t)
		d.removePod(t, podID)
	})

	t.Run("host network", func(t *testing.T) {
		pod := d.containerPod(t, "forward-host", true)
		podID := d.mustRunp(t, pod)
		hostPort := freePorts(t, 1)[0]
		d.run(t, podID, containerConfig(t, "web", 0, webServers("host-net", fmt.Sprintf("127.0.0.1:%d", hostPort))), pod)
		local := freePorts(t, 1)[0]
		pf := d.startPortForward(t, podID, fmt.Sprintf("%d:%d", local, hostPort))
		waitHTTP(t, local, "host-net")
		pf.stop(t)
		d.removePod(t, podID)
	})
}

// TestStreamLeaks runs 100 sessions of every kind, some cut off by their client, and
// requires the daemon to be back where it was: no process of a session left (runc,
// the exec'd commands), no goroutine and no file descriptor more than before.
func TestStreamLeaks(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{extraTOML: []string{`metrics_address = "127.0.0.1:0"`}})
	pod := d.containerPod(t, "leaks", false)
	podID := d.mustRunp(t, pod)
	web := d.run(t, podID, containerConfig(t, "web", 0, webServers("leak-web", "8080")), pod)
	ticker := d.run(t, podID, containerConfig(t, "ticker", 0, []string{"sh", "-c", "while true; do echo tick; sleep 0.2; done"}), pod)
	marker := randomSleep(t)

	kinds := []struct {
		name string
		n    int
		run  func(t *testing.T, i int)
	}{
		{"exec", 30, func(t *testing.T, i int) {
			if out := strings.TrimSpace(d.mustCrictl(t, "exec", web, "echo", strconv.Itoa(i))); out != strconv.Itoa(i) {
				t.Fatalf("exec %d printed %q", i, out)
			}
		}},
		{"exec with stdin", 15, func(t *testing.T, i int) {
			if out, _, err := d.crictlInput(t, fmt.Sprintf("in-%d\n", i), "exec", "-i", web, "cat"); err != nil || out != fmt.Sprintf("in-%d\n", i) {
				t.Fatalf("exec -i %d: %v, printed %q", i, err, out)
			}
		}},
		{"exec with a terminal", 10, func(t *testing.T, i int) {
			term := d.startUnderPty(t, 24, 80, "exec", "-it", web, "sh", "-c", fmt.Sprintf("echo tty-$((%d+1000))", i))
			term.waitExit(t)
			term.waitFor(t, fmt.Sprintf("tty-%d", i+1000))
		}},
		{"exec cut off", 10, func(t *testing.T, i int) {
			cmd := d.crictlCommand("exec", web, "sleep", marker)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitProcesses(t, "sleep "+marker, 1, 30*time.Second)
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			waitProcesses(t, "sleep "+marker, 0, 15*time.Second)
		}},
		{"attach cut off", 15, func(t *testing.T, i int) {
			cmd := d.crictlCommand("attach", ticker)
			var out syncBuffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, testenv.Until("crictl attach to show the ticker", func() bool { return strings.Contains(out.String(), "tick") }))
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}},
		{"port-forward", 20, func(t *testing.T, i int) {
			local := freePorts(t, 1)[0]
			pf := d.startPortForward(t, podID, fmt.Sprintf("%d:8080", local))
			waitHTTP(t, local, "leak-web")
			pf.stop(t)
		}},
	}

	// One of each first: what a daemon keeps once it has served a session (pools,
	// idle connections) is not a leak.
	for _, k := range kinds {
		k.run(t, 0)
	}
	daemonPid := d.pid(t)
	before := d.streamFootprint(t, daemonPid)
	t.Logf("before: %+v", before)

	total := 0
	start := time.Now()
	for _, k := range kinds {
		for i := range k.n {
			k.run(t, i+1)
			total++
		}
	}
	if total != 100 {
		t.Fatalf("ran %d sessions, want 100", total)
	}
	t.Logf("100 sessions took %v", time.Since(start).Round(time.Millisecond))

	var after footprint
	settled := testenv.Poll(30*time.Second, 100*time.Millisecond, testenv.Until("the sessions to be released", func() bool {
		after = d.streamFootprint(t, daemonPid)
		return after.goroutines <= before.goroutines && after.fds <= before.fds && len(after.sessionProcs) == 0
	})) == nil
	t.Logf("after: %+v", after)
	if !settled {
		t.Fatalf("after 100 sessions the daemon holds more than before: goroutines %d (before %d), fds %d (before %d), session processes %v",
			after.goroutines, before.goroutines, after.fds, before.fds, after.sessionProcs)
	}
	if procs := processesMatching("sleep " + marker); len(procs) > 0 {
		t.Fatalf("exec'd commands outlived their clients: %v", procs)
	}
	d.requireCtrState(t, web, "CONTAINER_RUNNING")
	d.requireCtrState(t, ticker, "CONTAINER_RUNNING")
	d.removePod(t, podID)
}

// ---------------------------------------------------------------------------
// Helpers

// randomSleep returns a number of seconds for sleep that marks a test's processes.
func randomSleep(t *testing.T) string {
	n, err := strconv.ParseUint(randomHex(t, 2), 16, 32)
	if err != nil {
		t.Fatal(err)
	}
	return strconv.FormatUint(100000+n, 10)
}

// webServers is a container command that serves each (body, listen address) pair
// with busybox httpd, the last one in the foreground.
func webServers(pairs ...string) []string {
	var script []string
	for i := 0; i+1 < len(pairs); i += 2 {
		dir := fmt.Sprintf("/www%d", i/2)
		script = append(script, fmt.Sprintf("mkdir -p %s && echo %s > %s/index.html", dir, pairs[i], dir))
		httpd := fmt.Sprintf("/bin/busybox httpd -p %s -h %s", pairs[i+1], dir)
		if i+2 >= len(pairs) {
			httpd = "exec " + httpd + " -f"
		}
		script = append(script, httpd)
	}
	return []string{"sh", "-c", strings.Join(script, " && ")}
}

// crictlCommand returns an unstarted crictl command on the daemon's socket.
func (d *daemon) crictlCommand(args ...string) *exec.Cmd {
	full := append([]string{
		"--config", os.DevNull,
		"--runtime-endpoint", "unix://" + d.socket,
		"--image-endpoint", "unix://" + d.socket,
		"--timeout", "30s",
	}, args...)
	return exec.Command(crictlPath, full...)
}

// crictlInput runs crictl with input on its stdin (killed after 90 s).
func (d *daemon) crictlInput(t *testing.T, input string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := d.crictlCommand(args...)
	cmd.Stdin = strings.NewReader(input)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err = waitCmd(cmd, 90*time.Second)
	t.Logf("crictl %s (with input): %v", strings.Join(args, " "), err)
	return out.String(), errb.String(), err
}

// waitCmd waits for a started command, killing it after limit.
func waitCmd(cmd *exec.Cmd, limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("%s still running after %v: killed", cmd.Path, limit)
	}
}

// terminal is crictl running under a pseudo-terminal of the test.
type terminal struct {
	cmd  *exec.Cmd
	pty  *os.File
	out  syncBuffer
	done chan error
}

// startUnderPty starts crictl with a terminal of rows x cols as its stdin, stdout
// and stderr; the test's cleanup kills it if it is still running.
func (d *daemon) startUnderPty(t *testing.T, rows, cols uint16, args ...string) *terminal {
	t.Helper()
	term := &terminal{cmd: d.crictlCommand(args...), done: make(chan error, 1)}
	f, err := pty.StartWithSize(term.cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatalf("start crictl %s under a pty: %v", strings.Join(args, " "), err)
	}
	term.pty = f
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(&term.out, f) // ends with EIO once crictl has exited
	}()
	go func() {
		err := term.cmd.Wait()
		<-copied
		term.done <- err
	}()
	t.Cleanup(func() {
		_ = term.cmd.Process.Kill()
		f.Close()
	})
	return term
}

func (term *terminal) write(t *testing.T, s string) {
	t.Helper()
	if _, err := io.WriteString(term.pty, s); err != nil {
		t.Fatalf("write to crictl's terminal: %v", err)
	}
}

// waitFor waits until everything in want has appeared on the terminal.
func (term *terminal) waitFor(t *testing.T, want ...string) {
	t.Helper()
	shows := func() bool {
		out := term.out.String()
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	}
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
		if !shows() {
			return fmt.Errorf("waited 30s for the terminal to show %q; it shows:\n%s", want, term.out.String())
		}
		return nil
	})
}

// retryUntil types input (again every second) until want appears after it.
func (term *terminal) retryUntil(t *testing.T, input, want string) {
	t.Helper()
	from := term.out.Len()
	testenv.Eventually(t, 30*time.Second, 0, func() error {
		term.write(t, input)
		for range 10 {
			time.Sleep(100 * time.Millisecond)
			if strings.Contains(term.out.String()[from:], want) {
				return nil
			}
		}
		return fmt.Errorf("typing %q never showed %q; the terminal shows:\n%s", input, want, term.out.String())
	})
}

// waitExit waits for crictl to exit by itself.
func (term *terminal) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-term.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("crictl did not exit; the terminal shows:\n%s", term.out.String())
	}
}

// kill ends crictl as a client that goes away does, and waits for it.
func (term *terminal) kill(t *testing.T) {
	t.Helper()
	_ = term.cmd.Process.Kill()
	term.waitExit(t)
}

// syncBuffer is a bytes.Buffer safe for a writer and readers in other goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// portForward is a crictl port-forward running in the background.
type portForward struct {
	cmd *exec.Cmd
	out *syncBuffer
}

// startPortForward starts crictl port-forward for the mappings (local:remote) and
// waits until it listens on every local port; the test's cleanup stops it.
func (d *daemon) startPortForward(t *testing.T, podID string, mappings ...string) *portForward {
	t.Helper()
	pf := &portForward{cmd: d.crictlCommand(append([]string{"port-forward", podID}, mappings...)...), out: &syncBuffer{}}
	pf.cmd.Stdout, pf.cmd.Stderr = pf.out, pf.out
	if err := pf.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pf.cmd.Process.Kill() })
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, testenv.Until("crictl port-forward to listen", func() bool {
		for _, m := range mappings {
			local, _, _ := strings.Cut(m, ":")
			if !strings.Contains(pf.out.String(), "Forwarding from 127.0.0.1:"+local+" ") {
				return false
			}
		}
		return true
	}))
	return pf
}

// stop ends crictl port-forward as a user does (SIGINT) and waits for it.
func (pf *portForward) stop(t *testing.T) {
	t.Helper()
	_ = pf.cmd.Process.Signal(syscall.SIGINT)
	if err := waitCmd(pf.cmd, 30*time.Second); err != nil {
		t.Logf("crictl port-forward: %v", err)
	}
}

// processesMatching returns the PIDs of the host's processes whose command line,
// with spaces between arguments, is exactly cmdline.
func processesMatching(cmdline string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Join(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00"), " ") == cmdline {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitProcesses waits until exactly n processes run cmdline, and returns them.
func waitProcesses(t *testing.T, cmdline string, n int, within time.Duration) []int {
	t.Helper()
	var pids []int
	testenv.Eventually(t, within, 100*time.Millisecond, func() error {
		if pids = processesMatching(cmdline); len(pids) != n {
			return fmt.Errorf("%d processes run %q after %v (%v), want %d", len(pids), cmdline, within, pids, n)
		}
		return nil
	})
	return pids
}

// pid returns the running daemon's PID.
func (d *daemon) pid(t *testing.T) int {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc == nil {
		t.Fatal("the daemon is not running")
	}
	return d.proc.Pid
}

// footprint is what sessions could leave in the daemon.
type footprint struct {
	goroutines   int
	fds          int
	sessionProcs []string // descendants of the daemon outside its conmons' trees
}

var procStatRE = regexp.MustCompile(`^\d+ \((.*)\) \S+ (\d+)`)

func (d *daemon) streamFootprint(t *testing.T, pid int) footprint {
	t.Helper()
	fp := footprint{goroutines: int(d.metric(t, "go_goroutines"))}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	fp.fds = len(fds)
	// Descendants of the daemon, without conmon and what runs under it (containers).
	entries, _ := os.ReadDir("/proc")
	comm, children := map[int]string{}, map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		m := procStatRE.FindSubmatch(b)
		if m == nil {
			continue
		}
		ppid, _ := strconv.Atoi(string(m[2]))
		comm[p] = string(m[1])
		children[ppid] = append(children[ppid], p)
	}
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if comm[c] == "conmon" {
				continue
			}
			fp.sessionProcs = append(fp.sessionProcs, fmt.Sprintf("%d:%s", c, comm[c]))
			queue = append(queue, c)
		}
	}
	return fp
}
