package test

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Helpers of the node the tests run on: nodes left by a test process that died
// (killed, or SIGPIPE on its output) before its cleanups ran, swept at the
// start of the next run; a unique network per daemon; namespaces, IP
// allocations and reachability on the node.

// ownerFile, in a node's directory, names the test process that made it.
const ownerFile = "e2e-owner"

// selfOwner identifies this process: its PID and start time (so that a reused
// PID does not pass for it).
func selfOwner() string { return fmt.Sprintf("%d %s", os.Getpid(), procStart(os.Getpid())) }

// procStart returns the start time of a process (field 22 of
// /proc/<pid>/stat), or "" when it does not exist.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// sweepStaleNodes removes the nodes of test processes that are gone: their
// mounts, bridges and directories. Their daemons died with them (parent-death
// signal). It returns what it removed.
func sweepStaleNodes() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "cj*"))
	var swept []string
	for _, dir := range dirs {
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not a node, or one being made
		}
		var pid int
		var start string
		if n, _ := fmt.Sscanf(string(owner), "%d %s", &pid, &start); n == 2 && procStart(pid) == start {
			continue // its test process is alive
		}
		sweepContainers(dir)
		for _, m := range mountsBelow(dir) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "net.d", "10-cjtest.conflist")); err == nil {
			var conf struct {
				Plugins []struct {
					Bridge string `json:"bridge"`
				} `json:"plugins"`
			}
			if json.Unmarshal(b, &conf) == nil && len(conf.Plugins) > 0 && strings.HasPrefix(conf.Plugins[0].Bridge, "cjt") {
				_ = exec.Command("ip", "link", "del", conf.Plugins[0].Bridge).Run()
			}
		}
		if os.RemoveAll(dir) == nil {
			swept = append(swept, dir)
		}
	}
	return swept
}

// mountsBelow lists the mount points in this mount namespace at or below
// dir, deepest first (none when the mount table cannot be read).
func mountsBelow(dir string) []string {
	mounts, _ := testenv.MountsBelow(dir)
	return mounts
}

var (
	netSeq atomic.Uint32
	netMu  sync.Mutex
)

// 10.100.0.0 - 10.219.255.0: clear of 10.85 (make run's cni0) and 10.88
// (the netns package's tests).
const subnetSpace = 120 * 250

func init() { netSeq.Store(mathrand.Uint32N(subnetSpace)) }

// newNetwork picks a bridge name and a /24 that no interface of the host
// uses, unique within this process (a counter) and likely across processes
// (a random start).
func newNetwork(t *testing.T) (bridge, subnet string, third [3]byte) {
	t.Helper()
	netMu.Lock()
	defer netMu.Unlock()
	for range 50 {
		n := netSeq.Add(1) % subnetSpace
		a, b := byte(100+n/250), byte(1+n%250)
		cidr := fmt.Sprintf("10.%d.%d.0/24", a, b)
		out, err := exec.Command("ip", "-o", "addr", "show", "to", cidr).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			continue
		}
		out, err = exec.Command("ip", "-o", "route", "show", "root", cidr).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			continue
		}
		name := "cjt" + randomHex(t, 3)
		if _, err := net.InterfaceByName(name); err == nil {
			continue
		}
		return name, cidr, [3]byte{10, a, b}
	}
	t.Fatal("no free bridge name and 10.x.y.0/24 subnet found in 50 tries")
	return "", "", [3]byte{}
}

// randomHex returns n random bytes as hex.
func randomHex(t *testing.T, n int) string { return testenv.RandomHex(t, n) }

// randomID returns a random ID shaped like a sandbox ID.
func randomID(t *testing.T) string { return randomHex(t, 32) }

var idRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// netnsPin is where the daemon pins a sandbox's network namespace.
func (d *daemon) netnsPin(id string) string { return d.node.Pin("net", id) }

// isNamespace reports whether path is a namespace file (a live pin).
func isNamespace(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// inNetns runs a command in the sandbox's network namespace and returns its
// output.
func (d *daemon) inNetns(t *testing.T, id string, args ...string) string {
	t.Helper()
	full := append([]string{"--net=" + d.netnsPin(id)}, args...)
	out, err := exec.Command("nsenter", full...).CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	return string(out)
}

// ipamAllocations returns host-local's allocations in the test network: IP
// -> sandbox ID.
func (d *daemon) ipamAllocations(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(d.ipamDir, d.network)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if e.Name() == "lock" || strings.HasPrefix(e.Name(), "last_reserved_ip") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // released meanwhile
			}
			t.Fatal(err)
		}
		owner, _, _ := strings.Cut(string(b), "\n")
		out[e.Name()] = strings.TrimSpace(owner)
	}
	return out
}

// requireReachable checks that the host reaches ip over the test bridge: the
// route goes through the bridge, and a TCP connection to a closed port is
// refused by the sandbox's kernel (an answer, not a timeout or "no route").
// No ping: iputils-ping is not installed everywhere.
func (d *daemon) requireReachable(t *testing.T, ip string) {
	t.Helper()
	out, err := exec.Command("ip", "-o", "route", "get", ip).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route get %s: %v\n%s", ip, err, out)
	}
	if !strings.Contains(string(out), "dev "+d.bridge+" ") {
		t.Fatalf("the host's route to %s does not go through the bridge %s: %s", ip, d.bridge, out)
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "9"), 3*time.Second)
	if err == nil {
		conn.Close()
		t.Fatalf("TCP connect to %s:9 succeeded: something listens in the sandbox?", ip)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("the host cannot reach the sandbox at %s over %s: TCP connect to a closed port gave %v, want connection refused", ip, d.bridge, err)
	}
}

// requireWholeSandbox fails the test unless the sandbox is ready with all
// its parts: a pinned network namespace whose eth0 holds the IP that
// inspectp reports, host-local's allocation of it, and a route to it.
func (d *daemon) requireWholeSandbox(t *testing.T, id string) {
	t.Helper()
	st := d.requireState(t, id, "SANDBOX_READY")
	if st.Status.Network == nil || st.Status.Network.IP == "" {
		t.Fatalf("sandbox %s is ready but has no IP", id)
	}
	ip := st.Status.Network.IP
	if !isNamespace(d.netnsPin(id)) {
		t.Fatalf("sandbox %s is ready but its network namespace pin %s is not a namespace", id, d.netnsPin(id))
	}
	if owner := d.ipamAllocations(t)[ip]; owner != id {
		t.Fatalf("sandbox %s reports IP %s, but host-local allocated it to %q", id, ip, owner)
	}
	if addr := d.inNetns(t, id, "ip", "-o", "addr", "show", "eth0"); !strings.Contains(addr, " inet "+ip+"/24 ") {
		t.Fatalf("sandbox %s reports IP %s, but its eth0 lacks it:\n%s", id, ip, addr)
	}
	d.requireReachable(t, ip)
}

// simulateReboot does to a stopped daemon's node what a reboot does: every
// mount under the namespace directory goes and the directory with it (it is
// on tmpfs: /var/run), so the pinned namespaces die; so do the pods' files
// in run_root, and containers/storage's run root (with the transient store,
// the records of the containers and of their layers) and its mounts (the
// containers' root filesystems); the veths of the pods go too.
func (d *daemon) simulateReboot(t *testing.T) {
	t.Helper()
	if alive, _ := d.running(); alive {
		t.Fatal("simulateReboot: the daemon is running")
	}
	for _, m := range mountsBelow(d.nsDir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Fatalf("reboot: unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(d.nsDir); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	// The pods' files are in run_root, on tmpfs too: their /dev/shm mounts go.
	for _, m := range mountsBelow(d.podFilesDir()) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Fatalf("reboot: unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(d.podFilesDir()); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	for _, m := range mountsBelow(d.storageRoot()) { // deepest first: root filesystems, then the driver's home
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Fatalf("reboot: unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(d.storageRunRoot()); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	// The veths die with their namespaces, asynchronously; delete what is
	// left.
	testenv.Eventually(t, 5*time.Second, 50*time.Millisecond, func() error {
		ports := d.bridgePorts(t)
		if len(ports) == 0 {
			return nil
		}
		for _, p := range ports {
			_ = exec.Command("ip", "link", "del", p.name).Run() // may be gone already
		}
		return fmt.Errorf("reboot: interfaces still on bridge %s: %v", d.bridge, ports)
	})
	t.Logf("reboot: namespace pins and veths removed")
}

// presetBridge makes the node's bridge before any pod does, with a MAC address of its own,
// as the bridge plugin's first ADD on a bridge leaves it. The crash matrix needs it: the
// bridge plugin of Debian's containernetworking-plugins 1.1.1 (fixed upstream since)
// reads the bridge's MAC before it plugs the pod's veth in and then sets the bridge's
// MAC to what it read. A bridge made by an ADD that was killed before that set (a crash
// while the network attaches, beside the pause process's start) takes the veth's MAC
// while the veth is its port, and 00:00:00:00:00:00 once the recovery's DEL removes the
// veth; every later ADD then fails with "could not set bridge's mac: invalid argument".
// That is the plugin's state to keep, not the runtime's: on a node the bridge has had
// its first ADD long before.
func (d *daemon) presetBridge(t *testing.T) {
	t.Helper()
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		t.Fatal(err)
	}
	mac[0] = 0x02 // locally administered, unicast
	for _, args := range [][]string{
		{"link", "add", "name", d.bridge, "type", "bridge"},
		{"link", "set", "dev", d.bridge, "address", mac.String()},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}
