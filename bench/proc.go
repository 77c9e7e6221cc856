package bench

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// PeerPID returns the PID of the process that listens on the unix socket of endpoint
// (unix:///path or a path): the peer credentials (SO_PEERCRED) of a connection to it
// name the process that called listen(2), the daemon.
func PeerPID(endpoint string) (int, error) {
	path := strings.TrimPrefix(endpoint, "unix://")
	conn, err := net.Dial("unix", path)
	if err != nil {
		return 0, fmt.Errorf("the daemon's PID: %w", err)
	}
	defer conn.Close()
	raw, err := conn.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("the daemon's PID: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, fmt.Errorf("the daemon's PID: %w", err)
	}
	if credErr != nil {
		return 0, fmt.Errorf("the daemon's PID: SO_PEERCRED of %s: %w", path, credErr)
	}
	return int(cred.Pid), nil
}

// procUsage is what /proc says about one process at one moment.
type procUsage struct {
	CPUSeconds float64 // utime + stime
	RSS        uint64  // VmRSS, bytes
	PeakRSS    uint64  // VmHWM, bytes
}

// readUsage reads the CPU time (/proc/<pid>/stat) and the resident memory, current and
// peak (/proc/<pid>/status), of process pid; its children are not counted.
func readUsage(fs procfs.FS, pid int) (procUsage, error) {
	p, err := fs.Proc(pid)
	if err != nil {
		return procUsage{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return procUsage{}, err
	}
	status, err := p.NewStatus()
	if err != nil {
		return procUsage{}, err
	}
	return procUsage{CPUSeconds: st.CPUTime(), RSS: status.VmRSS, PeakRSS: status.VmHWM}, nil
}

// helperUsage is the summed resident memory of a run's helper processes, the pause
// processes apart.
type helperUsage struct {
	RSS      uint64 // helpers other than pause processes (conmon, containerd's shim)
	N        int
	PauseRSS uint64 // crijournal's pause processes (crijournal-pause pause <sandbox ID>)
	Pauses   int
}

// helperRSS returns the summed resident memory (VmRSS) of the runtime's helper processes
// of the given pods and containers (conmon, containerd's shim, crijournal's pause
// processes) and how many there are. A helper is told by its command line, which names
// its container or pod by ID as one argument (conmon -c <container ID>,
// containerd-shim-runc-v2 -id <sandbox ID>, crijournal-pause pause <sandbox ID>); the
// containers' own processes and the daemon are not counted. It only reads /proc.
func helperRSS(fs procfs.FS, daemon int, ids []string) (helperUsage, error) {
	procs, err := fs.AllProcs()
	if err != nil {
		return helperUsage{}, err
	}
	var u helperUsage
	for _, p := range procs {
		if p.PID == daemon {
			continue
		}
		args, err := p.CmdLine()
		if err != nil || len(args) < 2 || !slices.ContainsFunc(args[1:], func(a string) bool { return slices.Contains(ids, a) }) {
			continue
		}
		status, err := p.NewStatus()
		if err != nil {
			continue // gone since the listing
		}
		if len(args) == 3 && args[1] == "pause" {
			u.PauseRSS += status.VmRSS
			u.Pauses++
			continue
		}
		u.RSS += status.VmRSS
		u.N++
	}
	return u, nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
