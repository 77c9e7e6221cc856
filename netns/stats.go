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

	"github.com/vishvananda/netlink"
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
// namespace pinned at path, sorted by name, from a link dump (no process is started).
// The kubelet's stats and metrics ask for every pod every ~10 s, so it does the least
// there is: the dump is asked for by the namespace's ID from one socket in the daemon's
// own namespace (byID), and only where the kernel cannot do that from a socket opened in
// the namespace, which the calling thread enters for that and leaves at once
// (interfacesInside); of the dump only the name, the flags and the counters are read
// (IFLA_STATS64, or IFLA_STATS on a kernel without it), where the netlink library
// deserialized every attribute of every link.
func Interfaces(path string) ([]InterfaceStats, error) {
	out, err := byID.interfaces(path)
	if errors.Is(err, errNoTarget) {
		out, err = interfacesInside(path)
	}
	if err != nil {
		return nil, fmt.Errorf("interfaces of %s: %w", path, err)
	}
	slices.SortFunc(out, func(a, b InterfaceStats) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// interfacesInside dumps the links of the namespace pinned at path from a socket opened
// in it: open, two setns, socket, bind, the dump and two close a call.
func interfacesInside(path string) ([]InterfaceStats, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	sock, err := routeSocketIn(fd)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	defer unix.Close(sock)
	if err := unix.Bind(sock, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	return dumpLinks(sock, 1, -1)
}

// byID is the daemon's dumper of the pods' links by namespace ID.
var byID = &nsDumper{}

// nsDumper dumps the links of other network namespaces from one NETLINK_ROUTE socket in
// the daemon's own, naming each by the ID the daemon's namespace has for it
// (IFLA_TARGET_NETNSID, Linux 4.20): per pod and scrape a stat of the pin, the dump's
// send and its receives, where opening a socket in the pod's namespace takes ten system
// calls (interfacesInside) and a thread locked meanwhile (docs/BENCHMARKS.md, issue 52:
// idle under 0.5 %).
//
// A namespace's ID is asked for once (netlink.GetNetNsIdByFd; one without an ID is
// given one, as the kernel gives one to a veth peer's namespace when the host's links
// are listed) and kept with the inode its pin showed. An ID stays its namespace's while
// the namespace lives, and a pin holds its namespace, so a stat of the pin that shows
// the same inode says the ID is still that namespace's; another inode (a new namespace
// pinned there) has its ID asked for again. An ID holds no reference: a pod's namespace
// goes with its pin whether or not it is read again, and nothing is to be closed.
type nsDumper struct {
	mu   sync.Mutex
	sock int // the socket, when open
	open bool
	seq  uint32
	ids  map[string]nsTarget // by pin path
	// off is set once the kernel was seen not to dump by ID: Interfaces then enters
	// the namespaces.
	off bool
}

// nsTarget is a pinned namespace's ID in the daemon's namespace (-1: none could be had),
// and the device and inode its pin showed when the ID was asked for.
type nsTarget struct {
	dev, ino uint64
	id       int32
}

// maxTargets bounds the IDs an nsDumper keeps (those of pods gone are forgotten when
// their pins are next read, or all at once past it).
const maxTargets = 4096

// errNoTarget says that a dump by namespace ID could not be made for this call: the
// caller dumps from inside the namespace instead.
var errNoTarget = errors.New("no dump by namespace ID")

// errTargetIgnored is parseLinks' answer for a link of a dump by ID that does not carry
// the ID back: a kernel that ignored the attribute and dumped the daemon's own links.
var errTargetIgnored = errors.New("the kernel ignored IFLA_TARGET_NETNSID")

// interfaces dumps the links of the namespace pinned at path by its ID; errNoTarget
// (wrapped) when that cannot be done, for the caller to dump them from inside.
func (d *nsDumper) interfaces(path string) ([]InterfaceStats, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		d.forget(path)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		return nil, errNoTarget
	}
	t, ok := d.ids[path]
	dev, ino := uint64(st.Dev), uint64(st.Ino) //nolint:unconvert // not uint64 on every architecture
	if !ok || t.dev != dev || t.ino != ino {
		// A namespace whose ID cannot be had (no namespace at all, say, or a daemon
		// that may not give IDs) is kept as such: read from inside, not asked again.
		id, _ := namespaceID(path, &st)
		if d.ids == nil || len(d.ids) >= maxTargets {
			d.ids = map[string]nsTarget{}
		}
		t = nsTarget{dev: dev, ino: ino, id: id}
		d.ids[path] = t
	}
	if t.id < 0 {
		return nil, errNoTarget
	}
	out, err := d.dump(t.id)
	if err != nil {
		// The namespace may have gone since the stat (its ID with it), or the kernel
		// may not dump by ID at all: from inside, the caller finds out which.
		delete(d.ids, path)
		if errors.Is(err, errTargetIgnored) {
			d.off = true
		}
		return nil, fmt.Errorf("%w: %w", errNoTarget, err)
	}
	return out, nil
}

// forget drops what d keeps of the pin at path.
func (d *nsDumper) forget(path string) {
	d.mu.Lock()
	delete(d.ids, path)
	d.mu.Unlock()
}

// dump makes one link dump of the namespace whose ID is id, on d's socket (opened if
// need be). A dump that failed leaves the socket closed: one left half read would
// refuse the next (EBUSY).
func (d *nsDumper) dump(id int32) ([]InterfaceStats, error) {
	if !d.open {
		// This goroutine's thread is in the daemon's namespace: threads that enter
		// others are locked to the goroutine that does (routeSocketIn, Pin).
		sock, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			return nil, fmt.Errorf("netlink socket: %w", err)
		}
		if err := unix.Bind(sock, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(sock)
			return nil, fmt.Errorf("netlink bind: %w", err)
		}
		d.sock, d.open = sock, true
	}
	d.seq++
	out, err := dumpLinks(d.sock, d.seq, id)
	if err != nil {
		unix.Close(d.sock)
		d.open = false
	}
	return out, err
}

// namespaceID returns the ID of the network namespace pinned at path in the daemon's
// namespace, giving it one if it has none. st is what a stat of path showed: the pin
// opened must be that namespace still.
func namespaceID(path string, st *unix.Stat_t) (int32, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		return -1, &os.PathError{Op: "fstat", Path: path, Err: err}
	}
	if fst.Dev != st.Dev || fst.Ino != st.Ino {
		return -1, fmt.Errorf("%s: pinned anew while read", path)
	}
	id, err := netlink.GetNetNsIdByFd(fd)
	if err != nil {
		return -1, fmt.Errorf("namespace ID of %s: %w", path, err)
	}
	if id < 0 { // none yet: the kernel gives the lowest free one
		if err := netlink.SetNetNsIdByFd(fd, -1); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("give %s a namespace ID: %w", path, err)
		}
		if id, err = netlink.GetNetNsIdByFd(fd); err != nil {
			return -1, fmt.Errorf("namespace ID of %s: %w", path, err)
		}
		if id < 0 {
			return -1, fmt.Errorf("%s has no namespace ID once given one", path)
		}
	}
	return int32(id), nil
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

// dumpLinks asks sock, bound, for every link (RTM_GETLINK dump) of its namespace, or
// of the namespace whose ID is nsid if nsid >= 0, as request seq, and reads the answer.
func dumpLinks(sock int, seq uint32, nsid int32) ([]InterfaceStats, error) {
	var b [unix.NLMSG_HDRLEN + unix.SizeofIfInfomsg + unix.SizeofRtAttr + 4]byte
	req := b[:unix.NLMSG_HDRLEN+unix.SizeofIfInfomsg]
	req[unix.NLMSG_HDRLEN] = unix.AF_UNSPEC // ifi_family; the rest of ifinfomsg is zero
	if nsid >= 0 {
		attr := b[len(req):]
		binary.NativeEndian.PutUint16(attr[0:2], uint16(len(attr)))
		binary.NativeEndian.PutUint16(attr[2:4], unix.IFLA_TARGET_NETNSID)
		binary.NativeEndian.PutUint32(attr[4:8], uint32(nsid))
		req = b[:]
	}
	binary.NativeEndian.PutUint32(req[0:4], uint32(len(req)))
	binary.NativeEndian.PutUint16(req[4:6], unix.RTM_GETLINK)
	binary.NativeEndian.PutUint16(req[6:8], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	binary.NativeEndian.PutUint32(req[8:12], seq)
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
		done, err := parseLinks(buf[:n], seq, nsid, &out)
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
// loopback and carry counters. done is true at the dump's end. For a dump by namespace
// ID (nsid >= 0), every link must carry that ID back (errTargetIgnored).
func parseLinks(b []byte, seq uint32, nsid int32, out *[]InterfaceStats) (done bool, err error) {
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
			// A dump that failed (the namespace of a dump by ID gone, say) ends with
			// its error in the done message.
			if len(m.Data) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code < 0 {
					return true, fmt.Errorf("netlink dump: %w", unix.Errno(-code))
				}
			}
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
			s, ok, err := linkStats(m, nsid)
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
// without counters. For a dump by namespace ID (nsid >= 0), the message must carry
// that ID back (IFLA_TARGET_NETNSID), loopback's too.
func linkStats(m *syscall.NetlinkMessage, nsid int32) (s InterfaceStats, ok bool, err error) {
	flags := binary.NativeEndian.Uint32(m.Data[8:12]) // ifi_flags
	loopback := flags&unix.IFF_LOOPBACK != 0
	if loopback && nsid < 0 {
		return s, false, nil
	}
	attrs, err := syscall.ParseNetlinkRouteAttr(m)
	if err != nil {
		return s, false, fmt.Errorf("link attributes: %w", err)
	}
	var stats32, stats64 []byte
	target := false
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFLA_IFNAME:
			s.Name = string(bytes.TrimRight(a.Value, "\x00"))
		case unix.IFLA_STATS:
			stats32 = a.Value
		case unix.IFLA_STATS64:
			stats64 = a.Value
		case unix.IFLA_TARGET_NETNSID:
			target = len(a.Value) >= 4 && int32(binary.NativeEndian.Uint32(a.Value)) == nsid
		}
	}
	if nsid >= 0 && !target {
		return InterfaceStats{}, false, errTargetIgnored
	}
	if loopback {
		return InterfaceStats{}, false, nil
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
