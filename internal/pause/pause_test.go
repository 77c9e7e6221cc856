package pause

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
// sleeper, if not "", is a file passed to it as its sleeper, as fd 4; extra are passed
// after it (from fd 4 without a sleeper).
func startPause(t *testing.T, cloneflags uintptr, env []string, sleeper string, extra ...*os.File) (*exec.Cmd, *os.File) {
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
	if sleeper != "" {
		// O_PATH, as the daemon opens it (see netns.PauseProgram).
		f, err := os.OpenFile(sleeper, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
		cmd.Env = append(cmd.Env, EnvSleeperFD+"="+strconv.Itoa(ReadyFD+1))
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, extra...)
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
			cmd, r := startPause(t, tc.flags, tc.env, "")
			if got := readReady(t, r); !strings.Contains(got, tc.want) {
				t.Errorf("ready pipe: %q, want an error that says %q", got, tc.want)
			}
			if err := cmd.Wait(); err == nil {
				t.Error("the pause program exited with status 0, want 1")
			}
		})
	}
}

// variants are the two ways the pause process ends up once confined: the Go program
// (no sleeper passed) or the sleeper it executes.
var variants = []struct {
	name    string
	sleeper bool
}{{"go", false}, {"sleeper", true}}

// sleeperPath is the sleeper testenv.RunWithPause built beside the pause program, or ""
// for a variant without one.
func sleeperPath(t *testing.T, sleeper bool) string {
	if !sleeper {
		return ""
	}
	return SleeperPath(testenv.PauseProgram(t))
}

// startConfined starts the pause program in new pid and mount namespaces, as the user
// user ("" for the default), and waits until it reports that it is confined.
func startConfined(t *testing.T, user string, sleeper bool) *exec.Cmd {
	t.Helper()
	ownNS, err := MountNamespace("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{EnvStarterMountNS + "=" + ownNS}
	if user != "" {
		env = append(env, EnvUser+"="+user)
	}
	cmd, r := startPause(t, unix.CLONE_NEWPID|unix.CLONE_NEWNS, env, sleeperPath(t, sleeper))
	if got := readReady(t, r); got != Ready {
		t.Fatalf("ready pipe: %q, want %q", got, Ready)
	}
	return cmd
}

// requireConfined fails the test unless the process pid runs program (the pause
// program or the sleeper) as uid with no capability, no new privileges and a seccomp
// filter, in an empty root.
func requireConfined(t *testing.T, pid int, program string, uid int) {
	t.Helper()
	if exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe"); err != nil || filepath.Base(exe) != program {
		t.Errorf("the pause process runs %q (%v), want %s", exe, err, program)
	}
	u := strconv.Itoa(uid)
	for field, want := range map[string]string{
		"Uid": strings.Repeat(u+"\t", 3) + u, "CapInh": "0000000000000000", "CapPrm": "0000000000000000",
		"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	} {
		if got := status(pid, field); got != want {
			t.Errorf("%s: %q, want %q", field, got, want)
		}
	}
	if entries, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/root"); err != nil || len(entries) != 0 {
		t.Errorf("the pause process's root holds %v (%v), want nothing", entries, err)
	}
}

// programName is the file name of the program a variant of the pause process runs.
func programName(t *testing.T, sleeper bool) string {
	if sleeper {
		return SleeperName
	}
	return filepath.Base(testenv.PauseProgram(t))
}

// TestSignals checks the confined pause process's signals, in the Go program and in the
// sleeper: SIGHUP, SIGQUIT and SIGABRT are ignored (and another signal such as SIGUSR1
// does nothing), SIGTERM and SIGINT end it with status 0.
func TestSignals(t *testing.T) {
	for _, v := range variants {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
			t.Run(v.name+"/"+sig.String(), func(t *testing.T) {
				cmd := startConfined(t, "", v.sleeper)
				requireConfined(t, cmd.Process.Pid, programName(t, v.sleeper), DefaultUser)
				for _, ignored := range []syscall.Signal{syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGABRT, syscall.SIGUSR1} {
					_ = cmd.Process.Signal(ignored)
				}
				time.Sleep(100 * time.Millisecond)
				if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
					t.Fatalf("SIGHUP, SIGQUIT, SIGABRT or SIGUSR1 ended the pause process: %v", err)
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
}

// TestSleeperAsRoot checks that a pause process that runs as uid 0 (a pod that asks for
// it) keeps no capability once it has executed the sleeper.
func TestSleeperAsRoot(t *testing.T) {
	cmd := startConfined(t, "0:0", true)
	requireConfined(t, cmd.Process.Pid, SleeperName, 0)
}

// TestSleeperMemory checks what the sleeper is for: a pause process of less than 1 MiB
// of resident memory (the Go program keeps about 2.4 MB).
func TestSleeperMemory(t *testing.T) {
	cmd := startConfined(t, "", true)
	rss := status(cmd.Process.Pid, "VmRSS")
	kb, err := strconv.Atoi(strings.TrimSuffix(rss, " kB"))
	if err != nil {
		t.Fatalf("VmRSS %q: %v", rss, err)
	}
	t.Logf("the sleeper's VmRSS: %d kB", kb)
	if kb > 1024 {
		t.Errorf("the sleeper's VmRSS is %d kB, want at most 1024", kb)
	}
}

// TestReapsOrphans checks that the pause process, the Go program and the sleeper, reaps
// an orphan left in its pid namespace.
func TestReapsOrphans(t *testing.T) {
	if _, err := exec.LookPath("nsenter"); err != nil {
		testenv.Need(t, "the orphan test needs nsenter (util-linux)")
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			cmd := startConfined(t, "", v.sleeper)
			pid := cmd.Process.Pid
			ns := "/proc/" + strconv.Itoa(pid) + "/ns/pid"
			out, err := exec.Command("nsenter", "--pid="+ns, "sh", "-c", `sleep 0.2 & echo $!`).Output()
			if err != nil {
				t.Fatalf("nsenter: %v", err)
			}
			orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
			if err != nil {
				t.Fatalf("orphan PID %q: %v", out, err)
			}
			// orphan is its PID in the pause process's namespace; find it in ours.
			testenv.Eventually(t, 5*time.Second, 20*time.Millisecond, func() error {
				for _, p := range childrenOf(pid) {
					if nspid := strings.Fields(status(p, "NSpid")); len(nspid) == 2 && nspid[1] == strconv.Itoa(orphan) {
						return fmt.Errorf("orphan %d (%d in the namespace) not reaped: state %q", p, orphan, status(p, "State"))
					}
				}
				return nil
			})
			if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
				t.Fatalf("the pause process is gone: %v", err)
			}
		})
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err == nil && status(p, "PPid") == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// TestSleeperFails checks that a pause process told of a sleeper it cannot execute
// reports why, and exits with status 1, rather than stay the Go program.
func TestSleeperFails(t *testing.T) {
	ownNS, err := MountNamespace("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	notProgram := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(notProgram, []byte("not a program\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		env     []string
		sleeper string
		want    string
	}{
		{"not a program", nil, notProgram, "execute the sleeper: exec format error"},
		{"the ready pipe's fd", []string{EnvSleeperFD + "=3"}, "", EnvSleeperFD + `="3": want a file descriptor above 3`},
		{"not a number", []string{EnvSleeperFD + "=x"}, "", EnvSleeperFD + `="x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{EnvStarterMountNS + "=" + ownNS}, tc.env...)
			cmd, r := startPause(t, unix.CLONE_NEWPID|unix.CLONE_NEWNS, env, tc.sleeper)
			if got := readReady(t, r); !strings.Contains(got, tc.want) {
				t.Errorf("ready pipe: %q, want an error that says %q", got, tc.want)
			}
			if err := cmd.Wait(); err == nil {
				t.Error("the pause program exited with status 0, want 1")
			}
		})
	}
}

// TestPlaced checks the wait to be placed (EnvPlacedFD): a pause process told that it
// is placed confines itself in a cgroup namespace of its own, which every one of its
// threads is in; one whose starter closes the pipe without saying so, or says something
// else, reports why and exits with status 1.
func TestPlaced(t *testing.T) {
	ownNS, err := MountNamespace("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		write string
		want  string // on the ready pipe: Ready, or part of the error
	}{
		{"placed", Placed, Ready},
		{"starter gave up", "", `the starter wrote "" and closed the pipe`},
		{"something else", "ready\n", `the starter wrote "ready\n"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			env := []string{EnvStarterMountNS + "=" + ownNS, EnvPlacedFD + "=" + strconv.Itoa(ReadyFD+1)}
			cmd, ready := startPause(t, unix.CLONE_NEWPID|unix.CLONE_NEWNS, env, "", r)
			if _, err := w.WriteString(tc.write); err != nil {
				t.Fatal(err)
			}
			w.Close()
			got := readReady(t, ready)
			if tc.want != Ready {
				if !strings.Contains(got, tc.want) {
					t.Fatalf("ready pipe: %q, want an error that says %q", got, tc.want)
				}
				if err := cmd.Wait(); err == nil {
					t.Error("the pause program exited with status 0, want 1")
				}
				return
			}
			if got != Ready {
				t.Fatalf("ready pipe: %q, want %q", got, Ready)
			}
			pid := strconv.Itoa(cmd.Process.Pid)
			own := nsInode(t, "/proc/"+pid+"/ns/cgroup")
			if own == nsInode(t, "/proc/self/ns/cgroup") {
				t.Fatal("the pause process is in its starter's cgroup namespace")
			}
			tasks, err := os.ReadDir("/proc/" + pid + "/task")
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range tasks {
				if got := nsInode(t, "/proc/"+pid+"/task/"+task.Name()+"/ns/cgroup"); got != own {
					t.Errorf("thread %s of the pause process is in cgroup namespace %d, want the process's %d", task.Name(), got, own)
				}
			}
		})
	}
}

// nsInode returns the inode of the namespace at path (a /proc/.../ns link).
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestSleeperName(t *testing.T) {
	if SleeperName != testenv.SleeperName {
		t.Errorf("SleeperName %q, testenv.SleeperName %q: the test programs are built under another name", SleeperName, testenv.SleeperName)
	}
	if got, want := SleeperPath("/usr/local/bin/crijournal-pause"), "/usr/local/bin/"+SleeperName; got != want {
		t.Errorf("SleeperPath: %q, want %q", got, want)
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

func TestStopRequested(t *testing.T) {
	for _, tc := range []struct {
		name string
		sigs []os.Signal
		want bool
	}{
		{"none", nil, false},
		{"SIGCHLD", []os.Signal{unix.SIGCHLD, unix.SIGCHLD}, false},
		{"SIGTERM after SIGCHLD", []os.Signal{unix.SIGCHLD, unix.SIGTERM}, true},
		{"SIGINT", []os.Signal{unix.SIGINT}, true},
	} {
		c := make(chan os.Signal, len(tc.sigs))
		for _, s := range tc.sigs {
			c <- s
		}
		if got := stopRequested(c); got != tc.want {
			t.Errorf("%s: stopRequested = %v, want %v", tc.name, got, tc.want)
		}
	}
}
