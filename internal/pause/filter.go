package pause

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter.
//
// The pause process needs far less than a container: once confined it only waits for
// signals and reaps children, and the Go runtime under it schedules threads, allocates
// memory and delivers signals; or it executes the sleeper, which starts, waits for
// signals and reaps children. Its filter allows those system calls (measured with
// strace over the program's life, plus what the runtime may call later: more threads,
// memory given back) and fails any other with EPERM, a filter far narrower than the
// RuntimeDefault profile containers get. A call of another architecture (x32 on
// amd64, or a 32-bit ABI) kills the process.

// allowedSyscalls are the system calls the confined pause process may make, on every
// architecture; archSyscalls adds the architecture's own.
var allowedSyscalls = []uintptr{
	// Signals, and reaping children.
	unix.SYS_RT_SIGACTION, unix.SYS_RT_SIGPROCMASK, unix.SYS_RT_SIGRETURN, unix.SYS_SIGALTSTACK,
	unix.SYS_WAIT4, unix.SYS_WAITID, unix.SYS_RESTART_SYSCALL,
	// The Go runtime: threads, scheduling, memory, time, its own signals.
	unix.SYS_CLONE, unix.SYS_CLONE3, unix.SYS_EXIT, unix.SYS_EXIT_GROUP,
	unix.SYS_FUTEX, unix.SYS_SCHED_YIELD, unix.SYS_SCHED_GETAFFINITY, unix.SYS_NANOSLEEP,
	unix.SYS_CLOCK_NANOSLEEP, unix.SYS_CLOCK_GETTIME, unix.SYS_GETPID, unix.SYS_GETTID,
	unix.SYS_TGKILL, unix.SYS_MMAP, unix.SYS_MUNMAP, unix.SYS_MADVISE, unix.SYS_MPROTECT,
	unix.SYS_BRK, unix.SYS_PRLIMIT64, unix.SYS_GETRANDOM,
	// Its netpoller and files: stdout, stderr (/dev/null), a panic's message.
	unix.SYS_READ, unix.SYS_WRITE, unix.SYS_CLOSE, unix.SYS_FCNTL, unix.SYS_EPOLL_CREATE1,
	unix.SYS_EPOLL_CTL, unix.SYS_EPOLL_PWAIT, unix.SYS_EVENTFD2, unix.SYS_PIPE2,
	// The sleeper (cmd/crijournal-pause-sleep, see Main): its exec, what the start-up of a
	// static glibc program calls that the Go runtime does not (the thread's TID and
	// robust futex list, restartable sequences; readlink of /proc/self/exe, which fails in
	// the empty root, in archSyscalls), and its wait for signals. Measured with strace -f
	// on the pause program's exec of the sleeper.
	unix.SYS_EXECVEAT, unix.SYS_SET_TID_ADDRESS, unix.SYS_SET_ROBUST_LIST, unix.SYS_RSEQ,
	unix.SYS_RT_SIGTIMEDWAIT,
}

// auditArch is the AUDIT_ARCH_* value of the architecture the program was built for.
var auditArch = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"arm64": unix.AUDIT_ARCH_AARCH64,
}

// seccomp_data's offsets: the system call's number, then its architecture.
const (
	offsetNr   = 0
	offsetArch = 4
)

// filterProgram returns the classic BPF program of the filter for arch (an AUDIT_ARCH_*
// value) and the allowed system call numbers.
func filterProgram(arch uint32, allowed []uintptr) ([]unix.SockFilter, error) {
	if len(allowed) > 255 {
		return nil, fmt.Errorf("seccomp filter: %d system calls, at most 255", len(allowed))
	}
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	prog := []unix.SockFilter{
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offsetArch),
		jeq(arch, 1, 0),
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_KILL_PROCESS),
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offsetNr),
	}
	// Each allowed number jumps over the rest to the last instruction, ALLOW.
	n := len(allowed)
	for i, nr := range allowed {
		prog = append(prog, jeq(uint32(nr), uint8(n-i), 0))
	}
	return append(prog,
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM)),
		stmt(unix.BPF_RET|unix.BPF_K, unix.SECCOMP_RET_ALLOW),
	), nil
}

// installFilter installs the filter on every thread of the process. No-new-privileges
// must be set already (dropPrivileges does).
func installFilter() error {
	arch, ok := auditArch[runtime.GOARCH]
	if !ok {
		return fmt.Errorf("seccomp filter: no system call list for %s", runtime.GOARCH)
	}
	prog, err := filterProgram(arch, append(allowedSyscalls, archSyscalls...))
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// TSYNC puts the filter on every thread; it answers the ID of a thread it could not
	// sync, if any.
	r, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("install seccomp filter: %w", errno)
	}
	if r != 0 {
		return fmt.Errorf("install seccomp filter: thread %d could not take it", r)
	}
	return nil
}
