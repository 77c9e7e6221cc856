package pause

import (
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// runFilter runs a classic BPF seccomp program on one system call of arch, as the
// kernel does, and returns the action: only the instructions filterProgram emits.
func runFilter(t *testing.T, prog []unix.SockFilter, arch uint32, nr uint32) uint32 {
	t.Helper()
	var data [64]byte // struct seccomp_data, little-endian as on amd64 and arm64
	binary.LittleEndian.PutUint32(data[offsetNr:], nr)
	binary.LittleEndian.PutUint32(data[offsetArch:], arch)
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if acc == in.K {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("instruction %d: unexpected code %#x", pc, in.Code)
		}
	}
	t.Fatal("the program ran off its end")
	return 0
}

func TestFilterProgram(t *testing.T) {
	const arch = unix.AUDIT_ARCH_X86_64
	allowed := []uintptr{unix.SYS_WAIT4, unix.SYS_FUTEX, unix.SYS_RT_SIGRETURN}
	prog, err := filterProgram(arch, allowed)
	if err != nil {
		t.Fatal(err)
	}
	eperm := unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)
	for _, tc := range []struct {
		name string
		arch uint32
		nr   uintptr
		want uint32
	}{
		{"first allowed", arch, unix.SYS_WAIT4, unix.SECCOMP_RET_ALLOW},
		{"middle allowed", arch, unix.SYS_FUTEX, unix.SECCOMP_RET_ALLOW},
		{"last allowed", arch, unix.SYS_RT_SIGRETURN, unix.SECCOMP_RET_ALLOW},
		{"mount", arch, unix.SYS_MOUNT, eperm},
		{"execve", arch, unix.SYS_EXECVE, eperm},
		{"ptrace", arch, unix.SYS_PTRACE, eperm},
		{"x32 wait4", arch, unix.SYS_WAIT4 | 0x40000000, eperm},
		{"another architecture", unix.AUDIT_ARCH_I386, unix.SYS_WAIT4, unix.SECCOMP_RET_KILL_PROCESS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := runFilter(t, prog, tc.arch, uint32(tc.nr)); got != tc.want {
				t.Errorf("action %#x, want %#x", got, tc.want)
			}
		})
	}
	if _, err := filterProgram(arch, make([]uintptr, 256)); err == nil {
		t.Error("a filter of 256 system calls was built; its jumps cannot reach")
	}
}

func TestParseUser(t *testing.T) {
	for _, tc := range []struct {
		in       string
		uid, gid int
		ok       bool
	}{
		{"", DefaultUser, DefaultUser, true},
		{"1000:2000", 1000, 2000, true},
		{"0:0", 0, 0, true},
		{"1000", 0, 0, false},
		{"a:b", 0, 0, false},
		{"-1:0", 0, 0, false},
		{"4294967296:0", 0, 0, false},
	} {
		uid, gid, err := parseUser(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (uid != tc.uid || gid != tc.gid)) {
			t.Errorf("parseUser(%q) = %d, %d, %v; want %d, %d, ok %v", tc.in, uid, gid, err, tc.uid, tc.gid, tc.ok)
		}
	}
}

func TestMain(m *testing.M) {
	os.Exit(testenv.RunWithPause(m))
}

// startPause starts the pause program with the given clone flags and environment,
// and returns it with the read end of its ready pipe. It is killed when the test ends.
func startPause(t *testing.T, cloneflags uintptr, env []string) (*exec.Cmd, *os.File) {
	t.Helper()
	testenv.RequireRoot(t, "pause tests start the pause program in namespaces of its own")
	program := testenv.PauseProgram(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(program, Arg, "test")
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: cloneflags, Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		r.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, r
}

// readReady returns what the pause process wrote on its ready pipe until it closed it.
func readReady(t *testing.T, r *os.File) string {
	t.Helper()
	if err := r.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read the ready pipe: %v", err)
	}
	return string(b)
}

// TestRefusesNodeNamespaces checks that the pause program changes no mount unless it
// runs in new pid and mount namespaces, other than the starter's it is told of.
func TestRefusesNodeNamespaces(t *testing.T) {
	ownNS, err := MountNamespace("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		flags uintptr
		env   []string
		want  string
	}{
		{"the starter's mount namespace", unix.CLONE_NEWPID, []string{EnvStarterMountNS + "=" + ownNS}, "starter's mount namespace"},
		{"not told the starter's", unix.CLONE_NEWPID | unix.CLONE_NEWNS, nil, EnvStarterMountNS + " is not set"},
		{"not PID 1", unix.CLONE_NEWNS, []string{EnvStarterMountNS + "=" + ownNS}, "not PID 1"},
		{"a bad user", unix.CLONE_NEWPID | unix.CLONE_NEWNS, []string{EnvStarterMountNS + "=" + ownNS, EnvUser + "=nobody"}, "want <uid>:<gid>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, r := startPause(t, tc.flags, tc.env)
			if got := readReady(t, r); !strings.Contains(got, tc.want) {
				t.Errorf("ready pipe: %q, want an error that says %q", got, tc.want)
			}
			if err := cmd.Wait(); err == nil {
				t.Error("the pause program exited with status 0, want 1")
			}
		})
	}
}

// TestSignals checks the confined pause process's signals: SIGHUP, SIGQUIT and SIGABRT
// are ignored, SIGTERM and SIGINT end it with status 0.
func TestSignals(t *testing.T) {
	ownNS, err := MountNamespace("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd, r := startPause(t, unix.CLONE_NEWPID|unix.CLONE_NEWNS, []string{EnvStarterMountNS + "=" + ownNS})
			if got := readReady(t, r); got != Ready {
				t.Fatalf("ready pipe: %q, want %q", got, Ready)
			}
			if s := status(cmd.Process.Pid, "Seccomp"); s != "2" {
				t.Errorf("Seccomp: %q, want 2 (a filter)", s)
			}
			for _, ignored := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGABRT} {
				_ = cmd.Process.Signal(ignored)
			}
			time.Sleep(100 * time.Millisecond)
			if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
				t.Fatalf("SIGHUP, SIGQUIT or SIGABRT ended the pause process: %v", err)
			}
			_ = cmd.Process.Signal(sig)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("pause process after %v: %v, want exit status 0", sig, err)
				}
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Fatalf("pause process still running 5s after %v", sig)
			}
		})
	}
}

// status returns a field of /proc/<pid>/status.
func status(pid int, field string) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
