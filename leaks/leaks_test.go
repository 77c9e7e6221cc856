package leaks

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/layout"
)

// testNode is a node of its own in a temporary directory, with a CNI network whose
// host-local directory and bridge are the test's.
type testNode struct {
	l       layout.Node
	ipamDir string
	bridge  string
	cgroup  string // the cgroup parent of the test (cgroupfs path)
}

func newTestNode(t *testing.T) *testNode {
	t.Helper()
	base := t.TempDir()
	n := &testNode{
		l: layout.Node{Root: filepath.Join(base, "root"), RunRoot: filepath.Join(base, "run"), Socket: filepath.Join(base, "cri.sock"),
			NamespaceDir: filepath.Join(base, "ns"), CNIConfDir: filepath.Join(base, "net.d"), CNICacheDir: filepath.Join(base, "cni-cache"),
			RuntimeRoots: map[string]string{"runc": filepath.Join(base, "run", "runc")}},
		ipamDir: filepath.Join(base, "ipam"),
		bridge:  "cjlk" + testenv.RandomHex(t, 3),
		cgroup:  "/cjleaks-" + testenv.RandomHex(t, 4),
	}
	conf := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "leaknet", "plugins": [{"type": "bridge", "bridge": %q,
		"ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": "10.99.0.0/24"}]]}}]}`, n.bridge, n.ipamDir)
	write(t, filepath.Join(n.l.CNIConfDir, "10-leak.conflist"), conf)
	// A temporary directory's run root is too long for conmon: its state directory is
	// under /run (layout.StateDirFor), outside the test's directory.
	if dir := n.l.ConmonState("runc").Dir(); strings.HasPrefix(dir, layout.ShortStateDirPrefix) {
		t.Cleanup(func() { _ = os.RemoveAll(dir) })
	}
	return n
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// find runs Find on the node with the records.
func (n *testNode) find(t *testing.T, down bool, records ...journal.Record) Report {
	t.Helper()
	rep, err := Find(context.Background(), Node{Layout: n.l, Records: records, DaemonDown: down, CgroupParents: []string{n.cgroup}})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func id(c byte) string { return strings.Repeat(string(c), 64) }

// TestFindEachKind plants each kind of leak on a clean node and sees Find report it, of
// the right owner; the same thing owned by a record is held, not leaked.
func TestFindEachKind(t *testing.T) {
	testenv.RequireRoot(t, "mounts, cgroups, interfaces and processes of a node")
	sb, ctr := id('a'), id('b')
	for _, tc := range []struct {
		kind  string
		plant func(t *testing.T, n *testNode) // plants something of sb or ctr
		owner string
	}{
		{KindPin, func(t *testing.T, n *testNode) { write(t, n.l.Pin("net", sb), "") }, sb},
		{KindPodFiles, func(t *testing.T, n *testNode) { write(t, filepath.Join(n.l.PodDir(sb), "hostname"), "h\n") }, sb},
		{KindMount, func(t *testing.T, n *testNode) {
			dir := filepath.Join(n.l.PodDir(sb), "shm")
			mkdir(t, dir)
			if err := syscall.Mount("shm", dir, "tmpfs", 0, "size=64k"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
		}, sb},
		{KindIP, func(t *testing.T, n *testNode) {
			write(t, filepath.Join(n.ipamDir, "leaknet", "10.99.0.2"), sb+"\r\neth0")
		}, sb},
		{KindCNICache, func(t *testing.T, n *testNode) { write(t, n.l.CNIResult("leaknet", sb, "eth0"), "{}") }, sb},
		{KindStorageContainer, func(t *testing.T, n *testNode) {
			write(t, filepath.Join(n.l.StorageRunRootDir(), "vfs-containers", "volatile-containers.json"), `[{"id": "`+ctr+`", "layer": "`+id('c')+`"}]`)
		}, ctr},
		{KindUsernsRootfs, func(t *testing.T, n *testNode) { mkdir(t, filepath.Join(n.l.UsernsRootfsDir(), ctr)) }, ctr},
		{KindRuntimeContainer, func(t *testing.T, n *testNode) {
			write(t, filepath.Join(n.l.RuntimeRoot("runc"), ctr, "state.json"), "{}")
		}, ctr},
		{KindConmonState, func(t *testing.T, n *testNode) { write(t, filepath.Join(n.l.ConmonState("runc").ExitsDir(), ctr), "0") }, ctr},
		{KindConmon, func(t *testing.T, n *testNode) {
			// A process whose command line names the state directory, as a conmon's does.
			cmd := exec.Command("sh", "-c", "sleep 60", "conmon", "-c", ctr, "--exit-dir", n.l.ConmonState("runc").ExitsDir()+"/")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		}, ctr},
		{KindCgroup, func(t *testing.T, n *testNode) {
			dir := filepath.Join(cgroupHierarchies()[0], n.cgroup, "crijournal-"+ctr)
			mkdir(t, dir)
			t.Cleanup(func() { _ = syscall.Rmdir(dir); _ = syscall.Rmdir(filepath.Dir(dir)) })
		}, ctr},
		{KindInterface, func(t *testing.T, n *testNode) {
			br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.bridge}}
			if err := netlink.LinkAdd(br); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = netlink.LinkDel(br) })
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.bridge + "v", MasterIndex: 0}, PeerName: n.bridge + "p"}
			if err := netlink.LinkAdd(veth); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = netlink.LinkDel(veth) })
			if err := netlink.LinkSetMaster(veth, br); err != nil {
				t.Fatal(err)
			}
		}, ""}, // a port whose peer is in no pinned namespace: nobody's
	} {
		t.Run(tc.kind, func(t *testing.T) {
			n := newTestNode(t)
			if rep := n.find(t, true); len(rep.Leaks) != 0 || len(rep.Held) != 0 {
				t.Fatalf("a clean node: %+v", rep)
			}
			tc.plant(t, n)
			rep := n.find(t, true)
			i := slices.IndexFunc(rep.Leaks, func(it Item) bool { return it.Kind == tc.kind })
			if i < 0 || rep.Leaks[i].Owner != tc.owner || rep.Leaks[i].Reason == "" {
				t.Fatalf("planted a %s of %q: leaks %v", tc.kind, tc.owner, rep.Leaks)
			}
			if tc.owner == "" {
				return
			}
			// Owned by records: held, no leak.
			records := []journal.Record{{ID: sb, Kind: journal.KindSandbox, State: journal.StateCreated},
				{ID: ctr, Kind: journal.KindContainer, Parent: sb, State: journal.StateCreated}}
			rep = n.find(t, true, records...)
			if len(rep.Leaks) != 0 || !slices.ContainsFunc(rep.Held, func(it Item) bool { return it.Kind == tc.kind && it.Owner == tc.owner }) {
				t.Errorf("with records of %s: leaks %v, held %v", tc.owner, rep.Leaks, rep.Held)
			}
		})
	}
}

// TestFindRecords: a record left half done is a leak while the daemon is down, not while
// it runs; a thing whose record's step is undone is a leak.
func TestFindRecords(t *testing.T) {
	n := newTestNode(t)
	sb := id('d')
	creating := journal.Record{ID: sb, Kind: journal.KindSandbox, State: journal.StateCreating, Stage: "network"}
	if rep := n.find(t, false, creating); len(rep.Leaks) != 0 || len(rep.Held) != 1 {
		t.Errorf("a creation under way while the daemon runs: %+v", rep)
	}
	rep := n.find(t, true, creating)
	if len(rep.Leaks) != 1 || rep.Leaks[0].Kind != KindRecord || !strings.Contains(rep.Leaks[0].Reason, "creating") {
		t.Errorf("a creation left half done while the daemon is down: %+v", rep)
	}

	pin := n.l.Pin("ipc", sb)
	write(t, pin, "")
	ready := journal.Record{ID: sb, Kind: journal.KindSandbox, State: journal.StateCreated,
		Steps: []journal.Step{{Seq: 1, Kind: "pin", Args: map[string]string{ArgPath: pin}, Status: journal.StepUndone}}}
	rep = n.find(t, true, ready)
	if len(rep.Leaks) != 1 || rep.Leaks[0].What != pin || !strings.Contains(rep.Leaks[0].Reason, "undone") {
		t.Errorf("a pin whose step is undone: %+v", rep)
	}
	ready.Steps = append(ready.Steps, journal.Step{Seq: 2, Kind: "pin", Args: map[string]string{ArgPath: pin}, Status: journal.StepDone})
	if rep := n.find(t, true, ready); len(rep.Leaks) != 0 {
		t.Errorf("a pin made again after its undo: %+v", rep)
	}
}

// TestFindLayerDirs: a layer directory no layer record names is a leak whoever's it is.
func TestFindLayerDirs(t *testing.T) {
	n := newTestNode(t)
	recorded, left := id('e'), id('f')
	write(t, filepath.Join(n.l.StorageRootDir(), "vfs-layers", "layers.json"), `[{"id": "`+recorded+`"}]`)
	mkdir(t, filepath.Join(n.l.StorageRootDir(), "vfs", "dir", recorded))
	mkdir(t, filepath.Join(n.l.StorageRootDir(), "vfs", "dir", left))
	rep := n.find(t, true)
	if len(rep.Leaks) != 1 || rep.Leaks[0].Kind != KindLayerDir || !strings.HasSuffix(rep.Leaks[0].What, left) {
		t.Errorf("leaks %v, want the unrecorded layer directory %s", rep.Leaks, left)
	}
}

// TestFindUsedPath: a step that only used a path (CNI ADD's network namespace) says
// nothing of it when it is undone.
func TestFindUsedPath(t *testing.T) {
	n := newTestNode(t)
	sb := id('9')
	pin := n.l.Pin("net", sb)
	write(t, pin, "")
	r := journal.Record{ID: sb, Kind: journal.KindSandbox, State: journal.StateCreated, Steps: []journal.Step{
		{Seq: 1, Kind: "netns-pin", Args: map[string]string{ArgPath: pin}, Status: journal.StepDone},
		{Seq: 2, Kind: "cni-attach", Args: map[string]string{"netns": pin}, Status: journal.StepUndone}}}
	if rep := n.find(t, true, r); len(rep.Leaks) != 0 {
		t.Errorf("a pin a stopped pod keeps: %+v", rep.Leaks)
	}
}

// TestFindInterfaceOfPinnedSandbox: a bridge port whose peer is in a sandbox's pinned
// network namespace is that sandbox's: held while its record is there, a leak once not.
func TestFindInterfaceOfPinnedSandbox(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces and interfaces")
	n := newTestNode(t)
	sb := id('7')
	pin := n.l.Pin("net", sb)
	write(t, pin, "")
	// A new network namespace, pinned at pin by a bind mount of this thread's.
	runtime.LockOSThread()
	orig, err := vnetns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := vnetns.New()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	err = syscall.Mount(fmt.Sprintf("/proc/self/task/%d/ns/net", syscall.Gettid()), pin, "", syscall.MS_BIND, "")
	if serr := vnetns.Set(orig); serr != nil {
		t.Fatalf("back to the test's network namespace: %v", serr) // the thread stays locked, and dies
	}
	runtime.UnlockOSThread()
	orig.Close()
	if err != nil {
		ns.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close(); _ = syscall.Unmount(pin, syscall.MNT_DETACH) })

	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: n.bridge}}
	if err := netlink.LinkAdd(br); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(br) })
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: n.bridge + "v"}, PeerName: n.bridge + "p"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netlink.LinkDel(veth) })
	peer, err := netlink.LinkByName(n.bridge + "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetMaster(veth, br); err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetNsFd(peer, int(ns)); err != nil {
		t.Fatal(err)
	}

	rec := journal.Record{ID: sb, Kind: journal.KindSandbox, State: journal.StateCreated}
	rep := n.find(t, false, rec)
	if len(rep.Leaks) != 0 || !slices.ContainsFunc(rep.Held, func(it Item) bool { return it.Kind == KindInterface && it.Owner == sb }) {
		t.Errorf("with the sandbox's record: leaks %v, held %v; want its interface held", rep.Leaks, rep.Held)
	}
	rep = n.find(t, false)
	if !slices.ContainsFunc(rep.Leaks, func(it Item) bool { return it.Kind == KindInterface && it.Owner == sb }) {
		t.Errorf("without a record: leaks %v; want the sandbox's interface", rep.Leaks)
	}
}

// TestConmons lists a process whose command line names the state directory, with its
// PID and the container it names, and leaves it out once it is a zombie (exited, not yet
// reaped): the harness's "no conmon still running" checks count on that.
func TestConmons(t *testing.T) {
	stateDir := t.TempDir()
	ctr := id('d')
	cmd := exec.Command("sh", "-c", "sleep 60", "conmon", "-c", ctr, "--exit-dir", stateDir+"/exits")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	if got := Conmons(stateDir); len(got) != 1 || got[0].PID != pid || got[0].ID != ctr || !strings.Contains(got[0].Cmdline, "-c "+ctr) {
		t.Fatalf("Conmons(%s) = %+v, want only PID %d naming %s", stateDir, got, pid, ctr)
	}
	if got := Conmons(t.TempDir()); len(got) != 0 {
		t.Errorf("Conmons of another state directory = %+v, want none", got)
	}

	// Killed and not waited for: a zombie of this process.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if !testenv.IsZombie(pid) {
			return fmt.Errorf("process %d is not a zombie yet (state %q)", pid, testenv.ProcState(pid))
		}
		return nil
	})
	if got := Conmons(stateDir); len(got) != 0 {
		t.Errorf("Conmons(%s) = %+v with its only process a zombie, want none", stateDir, got)
	}
}

// TestListLinks: a link dump interrupted by a change is made again, up to linkDumps
// times; any other answer is taken at once.
func TestListLinks(t *testing.T) {
	lo := []netlink.Link{&netlink.Device{LinkAttrs: netlink.LinkAttrs{Name: "lo", Index: 1}}}
	other := errors.New("netlink: permission denied")
	for _, tc := range []struct {
		name        string
		interrupted int   // dumps interrupted before the answer
		answer      error // the answer's error after them
		wantDumps   int
		wantLinks   bool
		wantErr     string
	}{
		{"whole at once", 0, nil, 1, true, ""},
		{"whole on the third dump", 2, nil, 3, true, ""},
		{"another error at once", 0, other, 1, false, "permission denied"},
		{"interrupted every time", linkDumps, nil, linkDumps, false, "run the check again"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dumps := 0
			links, err := listLinks(func() ([]netlink.Link, error) {
				dumps++
				if dumps <= tc.interrupted {
					return lo[:0], netlink.ErrDumpInterrupted
				}
				if tc.answer != nil {
					return nil, tc.answer
				}
				return lo, nil
			})
			if dumps != tc.wantDumps {
				t.Errorf("%d dumps, want %d", dumps, tc.wantDumps)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want one saying %q", err, tc.wantErr)
			}
			if got := len(links) == 1; got != tc.wantLinks {
				t.Errorf("links = %v, want lo: %v", links, tc.wantLinks)
			}
		})
	}
}
