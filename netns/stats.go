package netns

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// InterfaceStats are the counters of one network interface.
type InterfaceStats struct {
	Name                 string
	RxBytes, RxErrors    uint64
	TxBytes, TxErrors    uint64
	RxPackets, TxPackets uint64
	RxDropped, TxDropped uint64
}

// Interfaces reads the counters of every interface but loopback in the network
// namespace pinned at path, sorted by name, over a netlink socket opened in that
// namespace (no process is started). The kubelet's stats and metrics ask for every pod
// every ~10 s, so it does the least there is: the calling thread enters the namespace
// only to open the socket and comes back at once, and of the link dump only the name,
// the flags and the counters are read (IFLA_STATS64, or IFLA_STATS on a kernel without
// it), where the netlink library deserialized every attribute of every link.
func Interfaces(path string) ([]InterfaceStats, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("interfaces of %s: %w", path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	sock, err := routeSocketIn(fd)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("interfaces of %s: %w", path, err)
	}
	defer unix.Close(sock)
	out, err := dumpLinks(sock)
	if err != nil {
		return nil, fmt.Errorf("interfaces of %s: %w", path, err)
	}
	slices.SortFunc(out, func(a, b InterfaceStats) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ownNet is the daemon's own network namespace, where every thread not locked by a
// namespace change is (opened once, by the first routeSocketIn).
var ownNet struct {
	once sync.Once
	fd   int
	err  error
}

// routeSocketIn opens a NETLINK_ROUTE socket in the network namespace open at nsFD: a
// socket stays in the namespace it was made in, so the thread enters it, makes the
// socket and goes back to the daemon's own. A thread that cannot go back is left
// locked, so that it ends with its goroutine and no other runs in that namespace.
func routeSocketIn(nsFD int) (int, error) {
	runtime.LockOSThread()
	ownNet.once.Do(func() {
		// This thread has entered no namespace yet: its namespace is the daemon's.
		ownNet.fd, ownNet.err = unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	})
	if ownNet.err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("open the daemon's network namespace: %w", ownNet.err)
	}
	if err := unix.Setns(nsFD, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return -1, fmt.Errorf("enter the namespace: %w", err)
	}
	sock, serr := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err := unix.Setns(ownNet.fd, unix.CLONE_NEWNET); err != nil {
		if serr == nil {
			unix.Close(sock)
		}
		// Stays locked: the thread dies with this goroutine rather than serve others
		// in the pod's namespace.
		return -1, fmt.Errorf("return to the daemon's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	if serr != nil {
		return -1, fmt.Errorf("netlink socket: %w", serr)
	}
	return sock, nil
}

// dumpLinks asks sock for every link (RTM_GETLINK dump) and reads the answer.
func dumpLinks(sock int) ([]InterfaceStats, error) {
	if err := unix.Bind(sock, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	const seq = 1
	req := make([]byte, unix.NLMSG_HDRLEN+unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(req[0:4], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:6], unix.RTM_GETLINK)
	binary.NativeEndian.PutUint16(req[6:8], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:12], seq)
	req[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC // ifi_family; the rest of ifinfomsg is zero
	if err := unix.Sendto(sock, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink send: %w", err)
	}
	bp := dumpBuffers.Get().(*[]byte)
	defer dumpBuffers.Put(bp)
	buf := *bp
	var out []InterfaceStats
	for {
		n, _, err := unix.Recvfrom(sock, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("netlink receive: %w", err)
		}
		done, err := parseLinks(buf[:n], seq, &out)
		if err != nil || done {
			return out, err
		}
	}
}

// dumpBuffers hold the datagrams of link dumps: as large as the netlink library's receive
// buffer, more than the kernel puts in one.
var dumpBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// errDumpInterrupted is parseLinks' answer when the links changed during the dump: the
// answer may be incomplete (the netlink library's ErrDumpInterrupted).
var errDumpInterrupted = errors.New("link dump interrupted by a change, results may be incomplete")

// parseLinks reads one datagram of a link dump into out: the interfaces that are not
// loopback and carry counters. done is true at the dump's end.
func parseLinks(b []byte, seq uint32, out *[]InterfaceStats) (done bool, err error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return false, fmt.Errorf("netlink message: %w", err)
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Seq != seq {
			continue
		}
		if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
			return true, errDumpInterrupted
		}
		switch m.Header.Type {
		case unix.NLMSG_DONE:
			return true, nil
		case unix.NLMSG_ERROR:
			if len(m.Data) < 4 {
				return true, errors.New("netlink error: short message")
			}
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
				return true, fmt.Errorf("netlink error: %w", unix.Errno(-code))
			}
			return true, nil
		case unix.RTM_NEWLINK:
			if len(m.Data) < unix.SizeofIfInfomsg {
				return true, errors.New("link message: short ifinfomsg")
			}
			s, ok, err := linkStats(m)
			if err != nil {
				return true, err
			}
			if ok {
				*out = append(*out, s)
			}
		}
	}
	return false, nil
}

// linkStats reads one RTM_NEWLINK message: ok is false for loopback and for a link
// without counters.
func linkStats(m *syscall.NetlinkMessage) (s InterfaceStats, ok bool, err error) {
	flags := binary.NativeEndian.Uint32(m.Data[8:12]) // ifi_flags
	if flags&unix.IFF_LOOPBACK != 0 {
		return s, false, nil
	}
	attrs, err := syscall.ParseNetlinkRouteAttr(m)
	if err != nil {
		return s, false, fmt.Errorf("link attributes: %w", err)
	}
	var stats32, stats64 []byte
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFLA_IFNAME:
			s.Name = string(bytes.TrimRight(a.Value, "\x00"))
		case unix.IFLA_STATS:
			stats32 = a.Value
		case unix.IFLA_STATS64:
			stats64 = a.Value
		}
	}
	// The first eight counters of rtnl_link_stats64 (u64) and rtnl_link_stats (u32):
	// rx_packets, tx_packets, rx_bytes, tx_bytes, rx_errors, tx_errors, rx_dropped,
	// tx_dropped.
	var c [8]uint64
	switch {
	case stats64 != nil:
		if len(stats64) < 8*8 {
			return s, false, fmt.Errorf("link %s: short IFLA_STATS64 (%d bytes)", s.Name, len(stats64))
		}
		for i := range c {
			c[i] = binary.NativeEndian.Uint64(stats64[8*i:])
		}
	case stats32 != nil:
		if len(stats32) < 8*4 {
			return s, false, fmt.Errorf("link %s: short IFLA_STATS (%d bytes)", s.Name, len(stats32))
		}
		for i := range c {
			c[i] = uint64(binary.NativeEndian.Uint32(stats32[4*i:]))
		}
	default:
		return s, false, nil
	}
	s.RxPackets, s.TxPackets, s.RxBytes, s.TxBytes = c[0], c[1], c[2], c[3]
	s.RxErrors, s.TxErrors, s.RxDropped, s.TxDropped = c[4], c[5], c[6], c[7]
	return s, true, nil
}
