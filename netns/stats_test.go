package netns

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

func TestInterfaces(t *testing.T) {
	requirePlugins(t) // for ip and nsenter
	paths, err := Pin(context.Background(), t.TempDir(), newSandboxID(t), []Kind{Net}, "")
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	unpinAll(t, paths)
	ns := paths[Net]

	ifs, err := Interfaces(ns)
	if err != nil || len(ifs) != 0 {
		t.Fatalf("Interfaces of a namespace with loopback only = %v, %v; want none (loopback is left out)", ifs, err)
	}
	// A veth pair, eth0 and peer1, up, with a packet sent through eth0.
	for _, args := range [][]string{
		{"link", "add", "eth0", "type", "veth", "peer", "name", "peer1"},
		{"link", "set", "peer1", "up"},
		{"link", "set", "eth0", "up"},
		{"addr", "add", "192.0.2.1/24", "dev", "eth0"},
	} {
		if out, err := exec.Command("nsenter", append([]string{"--net=" + ns, "ip"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	// A ping of another address on eth0's subnet sends (ARP) through it.
	_ = exec.Command("nsenter", "--net="+ns, "bash", "-c", "echo hi > /dev/udp/192.0.2.2/9").Run()
	// The checks below tell what is missing if eth0 has sent nothing, or its peer has not
	// received all of it, within 5s. The kernel may send more of its own (IPv6 neighbour
	// discovery) while the counters are read, and the peer counts a packet as it processes
	// it, a moment after eth0 counts it sent: the counters are read until they agree.
	_ = testenv.Poll(5*time.Second, 20*time.Millisecond, func() error {
		if ifs, err = Interfaces(ns); err != nil {
			t.Fatal(err)
		}
		switch {
		case len(ifs) != 2:
			return nil
		case ifs[0].TxBytes == 0:
			return errors.New("eth0 has sent nothing yet")
		case ifs[1].RxBytes != ifs[0].TxBytes:
			return errors.New("peer1 has not received all eth0 sent yet")
		}
		return nil
	})
	if len(ifs) != 2 || ifs[0].Name != "eth0" || ifs[1].Name != "peer1" {
		t.Fatalf("Interfaces = %+v, want eth0 and peer1, sorted", ifs)
	}
	if ifs[0].TxPackets == 0 || ifs[0].TxBytes == 0 || ifs[1].RxBytes != ifs[0].TxBytes {
		t.Errorf("counters %+v, want eth0's sent bytes received by its peer", ifs)
	}
	// Those were dumped by the namespace's ID, from the daemon's namespace.
	byID.mu.Lock()
	_, kept := byID.ids[ns]
	off := byID.off
	byID.mu.Unlock()
	if !kept || off {
		t.Errorf("the namespace's ID kept %v, dumps by ID off %v; want kept, on", kept, off)
	}
	// From inside the namespace, the same links (their counters may have moved since).
	inside, err := interfacesInside(ns)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(inside, func(a, b InterfaceStats) int { return strings.Compare(a.Name, b.Name) })
	if len(inside) != 2 || inside[0].Name != "eth0" || inside[1].Name != "peer1" || inside[0].TxBytes < ifs[0].TxBytes {
		t.Errorf("from inside the namespace: %+v; want eth0 and peer1 as by ID, %+v", inside, ifs)
	}
	if _, err := Interfaces(t.TempDir()); err == nil {
		t.Error("Interfaces of a directory that is no namespace succeeded")
	}
}

// TestInterfacesPinnedAnew: the ID kept for a pin is not taken for another namespace
// pinned at the same path (the pod's namespace made again), even while the first one
// lives on; a pin gone is an error, and its ID is forgotten.
func TestInterfacesPinnedAnew(t *testing.T) {
	requirePlugins(t) // for ip and nsenter
	dir, id := t.TempDir(), newSandboxID(t)
	paths, err := Pin(context.Background(), dir, id, []Kind{Net}, "")
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	ns := paths[Net]
	if out, err := exec.Command("nsenter", "--net="+ns, "ip", "link", "add", "eth0", "type", "veth", "peer", "name", "peer1").CombinedOutput(); err != nil {
		t.Fatalf("ip link add: %v\n%s", err, out)
	}
	if ifs, err := Interfaces(ns); err != nil || len(ifs) != 2 {
		t.Fatalf("Interfaces of the first namespace = %+v, %v; want eth0 and peer1", ifs, err)
	}
	// The first namespace lives on, with its ID, while this descriptor is open.
	old, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(old)
	if err := Unpin(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	if _, err := Interfaces(ns); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Interfaces of a pin gone: %v, want ErrNotExist", err)
	}
	byID.mu.Lock()
	_, kept := byID.ids[ns]
	byID.mu.Unlock()
	if kept {
		t.Error("the ID of a pin gone is still kept")
	}
	again, err := Pin(context.Background(), dir, id, []Kind{Net}, "")
	if err != nil {
		t.Fatalf("Pin again: %v", err)
	}
	unpinAll(t, again)
	if again[Net] != ns {
		t.Fatalf("pinned again at %s, want %s", again[Net], ns)
	}
	if ifs, err := Interfaces(ns); err != nil || len(ifs) != 0 {
		t.Errorf("Interfaces of the namespace pinned anew = %+v, %v; want none (loopback only), not the first one's links", ifs, err)
	}
}

// linkMsg builds an RTM_NEWLINK message (or another type) of a link dump: header, ifinfomsg
// with flags, then the attributes given (type, value).
func linkMsg(typ uint16, seq, flags uint32, attrs ...[]byte) []byte {
	body := make([]byte, unix.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(body[8:12], flags)
	for _, a := range attrs {
		body = append(body, a...)
	}
	return nlMsg(typ, seq, 0, body)
}

func nlMsg(typ uint16, seq uint32, nlFlags uint16, body []byte) []byte {
	b := make([]byte, unix.NLMSG_HDRLEN, unix.NLMSG_HDRLEN+len(body)+4)
	binary.NativeEndian.PutUint32(b[0:4], uint32(unix.NLMSG_HDRLEN+len(body)))
	binary.NativeEndian.PutUint16(b[4:6], typ)
	binary.NativeEndian.PutUint16(b[6:8], nlFlags)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	b = append(b, body...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func rtAttr(typ uint16, value []byte) []byte {
	b := make([]byte, 4, 4+len(value)+3)
	binary.NativeEndian.PutUint16(b[0:2], uint16(4+len(value)))
	binary.NativeEndian.PutUint16(b[2:4], typ)
	b = append(b, value...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// counters encodes rx_packets, tx_packets, rx_bytes, tx_bytes, rx_errors, tx_errors,
// rx_dropped, tx_dropped (and zeros after, as the kernel's structs go on) in width bytes
// each.
func counters(width int, c ...uint64) []byte {
	b := make([]byte, width*(len(c)+4))
	for i, v := range c {
		if width == 8 {
			binary.NativeEndian.PutUint64(b[8*i:], v)
		} else {
			binary.NativeEndian.PutUint32(b[4*i:], uint32(v))
		}
	}
	return b
}

// TestParseLinks: what a link dump's datagrams give, as the netlink library read them:
// loopback and links without counters left out, IFLA_STATS64 over IFLA_STATS, the name
// without its NUL, messages of another request ignored, the dump's end, its errors.
func TestParseLinks(t *testing.T) {
	name := func(s string) []byte { return rtAttr(unix.IFLA_IFNAME, append([]byte(s), 0)) }
	c64 := rtAttr(unix.IFLA_STATS64, counters(8, 1, 2, 3, 4, 5, 6, 7, 8))
	c32 := rtAttr(unix.IFLA_STATS, counters(4, 10, 20, 30, 40, 50, 60, 70, 80))
	eth0 := InterfaceStats{Name: "eth0", RxPackets: 1, TxPackets: 2, RxBytes: 3, TxBytes: 4, RxErrors: 5, TxErrors: 6, RxDropped: 7, TxDropped: 8}
	done := nlMsg(unix.NLMSG_DONE, 1, unix.NLM_F_MULTI, make([]byte, 4))
	errMsg := func(code int32) []byte {
		b := make([]byte, 4+unix.NLMSG_HDRLEN)
		binary.NativeEndian.PutUint32(b, uint32(code))
		return nlMsg(unix.NLMSG_ERROR, 1, 0, b)
	}
	doneErr := func(code int32) []byte {
		return nlMsg(unix.NLMSG_DONE, 1, unix.NLM_F_MULTI, binary.NativeEndian.AppendUint32(nil, uint32(code)))
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	const id = 7
	target := func(nsid int32) []byte {
		return rtAttr(unix.IFLA_TARGET_NETNSID, binary.NativeEndian.AppendUint32(nil, uint32(nsid)))
	}
	for _, tt := range []struct {
		name    string
		b       []byte
		want    []InterfaceStats
		done    bool
		wantErr bool
		byID    bool // a dump by namespace ID (id)
	}{
		{"64-bit counters", linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), c64), []InterfaceStats{eth0}, false, false, false},
		{"64-bit over 32-bit", linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), c32, c64), []InterfaceStats{eth0}, false, false, false},
		{"32-bit only", linkMsg(unix.RTM_NEWLINK, 1, 0, name("net1"), c32),
			[]InterfaceStats{{Name: "net1", RxPackets: 10, TxPackets: 20, RxBytes: 30, TxBytes: 40, RxErrors: 50, TxErrors: 60, RxDropped: 70, TxDropped: 80}}, false, false, false},
		{"loopback left out", linkMsg(unix.RTM_NEWLINK, 1, unix.IFF_LOOPBACK|unix.IFF_UP, name("lo"), c64), nil, false, false, false},
		{"no counters left out", linkMsg(unix.RTM_NEWLINK, 1, 0, name("dummy0")), nil, false, false, false},
		{"another request's message ignored", linkMsg(unix.RTM_NEWLINK, 2, 0, name("eth0"), c64), nil, false, false, false},
		{"then done", cat(linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), c64), done), []InterfaceStats{eth0}, true, false, false},
		{"ack ends", errMsg(0), nil, true, false, false},
		{"done with an error", cat(linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), c64),
			doneErr(-int32(unix.EINVAL))),
			[]InterfaceStats{eth0}, true, true, false},
		{"error", errMsg(-int32(unix.EPERM)), nil, true, true, false},
		{"interrupted", nlMsg(unix.RTM_NEWLINK, 1, unix.NLM_F_DUMP_INTR, make([]byte, unix.SizeofIfInfomsg)), nil, true, true, false},
		{"short counters", linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), rtAttr(unix.IFLA_STATS64, make([]byte, 16))), nil, true, true, false},
		{"short ifinfomsg", nlMsg(unix.RTM_NEWLINK, 1, 0, make([]byte, 8)), nil, true, true, false},
		{"by ID, the ID carried back", linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), c64, target(id)), []InterfaceStats{eth0}, false, false, true},
		{"by ID, loopback left out", linkMsg(unix.RTM_NEWLINK, 1, unix.IFF_LOOPBACK, name("lo"), c64, target(id)), nil, false, false, true},
		{"by ID, no ID carried back", linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), c64), nil, true, true, true},
		{"by ID, loopback without the ID", linkMsg(unix.RTM_NEWLINK, 1, unix.IFF_LOOPBACK, name("lo"), c64), nil, true, true, true},
		{"by ID, another ID", linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), c64, target(id+1)), nil, true, true, true},
		{"not by ID, an ID ignored", linkMsg(unix.RTM_NEWLINK, 1, 0, name("eth0"), c64, target(id)), []InterfaceStats{eth0}, false, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []InterfaceStats
			nsid := int32(-1)
			if tt.byID {
				nsid = id
			}
			done, err := parseLinks(tt.b, 1, nsid, &got)
			if done != tt.done || (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("parseLinks = %+v, done %v, err %v; want %+v, done %v, error %v", got, done, err, tt.want, tt.done, tt.wantErr)
			}
		})
	}
}
