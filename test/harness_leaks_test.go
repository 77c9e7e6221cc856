package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/layout"
	"github.com/crijournal/crijournal/leaks"
	"github.com/crijournal/crijournal/server"
)

// The leak check: everything a sandbox or a container may leave on the node,
// and the removal of what a test's node still holds when it ends.

// assertNoLeaks fails the test if the node holds anything of a sandbox or a
// container other than the kept ones: namespace pins, mounts, IP
// allocations, veths on the test bridge, libcni cache entries, runtime
// containers, conmons, storage containers, cgroups and, when the daemon is
// stopped, journal records.
func (d *daemon) assertNoLeaks(t *testing.T, keep ...string) {
	t.Helper()
	if leaks := d.leaks(t, keep...); len(leaks) > 0 {
		t.Errorf("leaked (keeping %s):\n  %s", keptList(keep), strings.Join(leaks, "\n  "))
	}
}

// stopClean ends a test's daemon and requires a clean node: it stops the daemon, checks
// that nothing leaked (journal records included) and that the journal file is sound.
func (d *daemon) stopClean(t *testing.T) {
	t.Helper()
	d.stop(t)
	d.assertNoLeaks(t)
	d.checkJournal(t)
}

// waitNoLeaks polls until the node holds nothing but the kept sandboxes, for
// things that are cleaned up in the background (cache expiry).
func (d *daemon) waitNoLeaks(t *testing.T, within time.Duration, keep ...string) {
	t.Helper()
	start := time.Now()
	var leaks []string
	for {
		leaks = d.leaks(t, keep...)
		if len(leaks) == 0 {
			t.Logf("no leaks after %v", time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > within {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("still leaked %v later (keeping %s):\n  %s", within, keptList(keep), strings.Join(leaks, "\n  "))
}

func keptList(keep []string) string {
	if len(keep) == 0 {
		return "nothing"
	}
	return strings.Join(keep, ", ")
}

// leaks lists, one a line, what the node holds that does not belong to a
// kept sandbox: what the daemon's own check, `crijournal inspect --leaks`, finds
// on the node (with the journal's records only while the daemon is stopped; a
// kept one's thing its record says is undone is a leak too), what it does not
// look at (leaksBeside), and the systemd units of the node's pods.
func (d *daemon) leaks(t *testing.T, keep ...string) []string {
	t.Helper()
	kept := func(s string) bool {
		for _, id := range keep {
			if strings.Contains(s, id) {
				return true
			}
		}
		return false
	}
	d.waitRemovals(t)
	alive, _ := d.running()
	rep := d.inspectLeaks(t)
	var found []string
	for _, it := range append(rep.Leaks, rep.Held...) {
		if it.Kind == leaks.KindRecord && alive {
			continue // the journal is checked when the daemon is stopped
		}
		if d.nodeLeak(it, kept) {
			found = append(found, it.String())
		}
	}
	found = append(found, d.leaksBeside(t, rep, kept, keep)...)
	// systemd units: scopes and pod slices (cgroup_manager = "systemd").
	found = append(found, d.unitLeaks(t, kept, len(keep) > 0)...)
	slices.Sort(found)
	return found
}

// nodeLeak reports whether an item of inspect --leaks is a leak of a test: whatever
// belongs to no kept sandbox or container, and what a kept one's record says is undone.
// The pods' slices of the systemd driver, named after the pod, are checked as units
// (unitLeaks), their scopes' directories below them here.
func (d *daemon) nodeLeak(it leaks.Item, kept func(string) bool) bool {
	if it.Kind == leaks.KindCgroup && e2eSystemd() && strings.HasSuffix(it.What, ".slice") {
		return false
	}
	if kept(it.What) || (it.Owner != "" && kept(it.Owner)) {
		return it.Reason != "" && it.Kind != leaks.KindRecord && strings.Contains(it.Reason, "undone")
	}
	return true
}

// inspectLeaks runs `crijournal inspect --leaks --json` on the test's node: the daemon's
// leak check, which knows the node's paths (package layout), with the cgroups below the
// node's cgroup parent.
func (d *daemon) inspectLeaks(t *testing.T) leaks.Report {
	t.Helper()
	cmd := exec.Command(daemonBinary(t), "inspect", "--leaks", "--json", "--config", d.configPath, "--cgroup-parent", d.cgroupRoot())
	cmd.Env = daemonEnv(d.opts.env)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var rep leaks.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("crijournal inspect --leaks: %v (%v)\nstdout: %s\nstderr: %s", err, jerr, stdout.Bytes(), stderr.Bytes())
	}
	if (err != nil) != (len(rep.Leaks) > 0) {
		t.Errorf("crijournal inspect --leaks exited with %v, reporting %d leak(s); stderr: %s", err, len(rep.Leaks), stderr.Bytes())
	}
	return rep
}

// leaksBeside lists what inspect --leaks does not look at but the test's node may hold:
// mounts below the node's directory outside the daemon's directories, IP files and
// bridge ports of the test's network when its configuration is gone from the daemon's
// CNI directory.
func (d *daemon) leaksBeside(t *testing.T, rep leaks.Report, kept func(string) bool, keep []string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, it := range append(rep.Leaks, rep.Held...) {
		seen[it.Kind+" "+it.What] = true
	}
	var out []string
	for _, m := range mountsBelow(d.base) {
		switch {
		case seen[leaks.KindMount+" "+m], m == d.nsDir || strings.HasPrefix(m, d.nsDir+"/"),
			m == filepath.Join(d.storageRoot(), "overlay"), kept(m):
			continue
		}
		out = append(out, "mount "+m)
	}
	for ip, owner := range d.ipamAllocations(t) {
		p := filepath.Join(d.ipamDir, d.network, ip)
		if !seen[leaks.KindIP+" "+p] && !kept(owner) {
			out = append(out, fmt.Sprintf("IP allocation %s of %s (%s)", ip, owner, p))
		}
	}
	keptIfindex := map[string]bool{}
	for _, id := range keep {
		if !isNamespace(d.netnsPin(id)) {
			continue
		}
		o, err := exec.Command("nsenter", "--net="+d.netnsPin(id), "ip", "-o", "link", "show", "eth0").CombinedOutput()
		if err != nil {
			continue // a kept sandbox with no network (stopped, host network)
		}
		if m := peerRE.FindStringSubmatch(string(o)); m != nil {
			keptIfindex[m[1]] = true
		}
	}
	for _, v := range d.bridgePorts(t) {
		what := fmt.Sprintf("%s (index %s) on bridge %s", v.name, v.index, d.bridge)
		if !seen[leaks.KindInterface+" "+what] && !keptIfindex[v.index] {
			out = append(out, "interface "+what)
		}
	}
	return out
}

// waitRemovals waits, while the daemon runs and answers, until it has no removal
// under way: a removal answers before its containers' root filesystems are deleted
// (journal.Remove, storage.RegisterUndos), and what is left of it is no leak until the
// daemon has had its moment to finish. Removals still under way after
// removalsFinishWithin fail the test.
func (d *daemon) waitRemovals(t *testing.T) {
	t.Helper()
	if alive, _ := d.running(); !alive {
		return
	}
	const removalsFinishWithin = 15 * time.Second
	// A connection of its own, closed on return: leaks() runs in waitNoLeaks' polls,
	// and d.cri's connections stay open until the test ends.
	conn := d.criConn(t)
	defer conn.Close()
	cri := runtimeapi.NewRuntimeServiceClient(conn)
	pending := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := cri.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		if err != nil {
			return "", err
		}
		return st.GetInfo()[server.StatusInfoPendingRemovals], nil
	}
	err := testenv.Poll(removalsFinishWithin, 10*time.Millisecond, func() error {
		n, err := pending()
		if err != nil {
			t.Logf("not waiting for removals under way: Status: %v", err)
			return nil
		}
		if n != "0" && n != "" {
			return fmt.Errorf("%s removals still under way", n)
		}
		return nil
	})
	if err != nil {
		t.Errorf("%v %v later", err, removalsFinishWithin)
	}
}

// podFilesDir is where the daemon keeps the sandboxes' files.
func (d *daemon) podFilesDir() string { return d.node.PodFilesDir() }

// peerRE finds the peer's interface index in `ip -o link show eth0` inside a
// namespace: "3: eth0@if12: <...".
var peerRE = regexp.MustCompile(`^\d+: [^@:]+@if(\d+):`)

type bridgePort struct{ index, name string }

// bridgePorts lists the interfaces attached to the test bridge (none when the
// bridge does not exist).
func (d *daemon) bridgePorts(t *testing.T) []bridgePort {
	t.Helper()
	out, err := exec.Command("ip", "-o", "link", "show", "master", d.bridge).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "does not exist") || strings.Contains(string(out), "Cannot find device") {
			return nil
		}
		t.Fatalf("ip -o link show master %s: %v\n%s", d.bridge, err, out)
	}
	var ports []bridgePort
	for line := range strings.Lines(string(out)) {
		m := portRE.FindStringSubmatch(line)
		if m != nil {
			ports = append(ports, bridgePort{index: m[1], name: m[2]})
		}
	}
	return ports
}

// portRE parses a line of `ip -o link`: "12: veth1234@if3: <...".
var portRE = regexp.MustCompile(`^(\d+): ([^@:]+)[@:]`)

// runcList lists the runtime's containers under root (runc list, which would
// make root if it did not exist).
func runcList(root string) ([]string, error) {
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	out, err := runcCmd("--root", root, "list", "-q").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("runc --root %s list: %v: %s", root, err, out)
	}
	return strings.Fields(string(out)), nil
}

// storageContainers reads containers/storage's containers from its
// containers.json files (any driver) in its roots (the graph root and the run
// root, which holds them in transient store mode), without opening the store
// (the daemon holds its locks): container ID -> its layer's ID (which names
// its root filesystem's mount).
func storageContainers(roots ...string) (map[string]string, error) {
	ids := map[string]string{}
	for _, name := range []string{"containers.json", "volatile-containers.json"} {
		var files []string
		for _, root := range roots {
			found, _ := filepath.Glob(filepath.Join(root, "*-containers", name))
			files = append(files, found...)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			var cs []struct {
				ID    string `json:"id"`
				Layer string `json:"layer"`
			}
			if len(bytes.TrimSpace(b)) > 0 {
				if err := json.Unmarshal(b, &cs); err != nil {
					return nil, fmt.Errorf("%s: %w", f, err)
				}
			}
			for _, c := range cs {
				ids[c.ID] = c.Layer
			}
		}
	}
	return ids, nil
}

// cgroupHierarchies lists the mounted cgroup hierarchies: on cgroup v1 each
// controller's (and name=systemd's, and the unified one beside them); on a cgroup v2
// node the one unified hierarchy, /sys/fs/cgroup itself.
func cgroupHierarchies() []string {
	if cgroupV2Node() {
		return []string{"/sys/fs/cgroup"}
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	return hierarchies
}

// cgroupDirs lists the cgroups below parent in every hierarchy, deepest
// first (the parent itself excluded).
func cgroupDirs(parent string) []string {
	var out []string
	for _, h := range cgroupHierarchies() {
		root := filepath.Join(h, parent)
		_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() && p != root {
				out = append(out, p)
			}
			return nil
		})
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// containerLeaks lists what containers left on the node that kept does not
// accept: runtime containers, conmons, storage containers, conmon's state
// files, cgroups under the pods' cgroup parent, and mounts under the node's
// directory (but the namespace pins and the pods' files, checked apart).
func (d *daemon) containerLeaks(t *testing.T, kept func(string) bool) []string {
	t.Helper()
	rep := d.inspectLeaks(t)
	var out []string
	for _, it := range append(rep.Leaks, rep.Held...) {
		switch it.Kind {
		case leaks.KindRuntimeContainer, leaks.KindConmon, leaks.KindStorageContainer, leaks.KindLayerDir,
			leaks.KindUsernsRootfs, leaks.KindConmonState, leaks.KindCgroup:
		case leaks.KindMount:
			if it.What == d.nsDir || strings.HasPrefix(it.What, d.nsDir+"/") || strings.HasPrefix(it.What, d.podFilesDir()+"/") {
				continue // namespace pins and the pods' own files: leaks checks them
			}
		default:
			continue
		}
		if d.nodeLeak(it, kept) {
			out = append(out, it.String())
		}
	}
	return out
}

// removeContainersLeft removes what containers a test left on its node once
// the daemon is stopped: it kills their conmons, deletes their runtime
// containers, removes their cgroups and conmon's state directory.
func (d *daemon) removeContainersLeft(t *testing.T) {
	removeNodeContainers(t.Logf, d.runcRoot(), d.ociStateDir, d.cgroupRoot())
	if h := d.opts.secondHandler; h != "" {
		removeNodeContainers(t.Logf, d.node.RuntimeRoot(h), d.node.ConmonState(h).Dir(), d.cgroupRoot())
	}
}

// handlerRoot is the runc root of the handler opts.secondHandler names.
func (d *daemon) handlerRoot(handler string) string {
	return filepath.Join(d.runRoot, "runc-"+handler)
}

// sweepContainers removes the containers of a node whose test process died.
func sweepContainers(dir string) {
	runRoot := filepath.Join(dir, "run")
	node := layout.Node{RunRoot: runRoot, RuntimeRoots: map[string]string{"runc": filepath.Join(runRoot, "runc")}}
	removeNodeContainers(func(string, ...any) {}, node.RuntimeRoot("runc"), node.ConmonState("runc").Dir(), "/cje2e-"+filepath.Base(dir))
	if e2eSystemd() {
		removeNodeContainers(func(string, ...any) {}, node.RuntimeRoot("runc"), node.ConmonState("runc").Dir(), "/"+nodeSlice(dir))
	}
	// A second handler's, under any name (TestContainerDetails).
	roots, _ := filepath.Glob(filepath.Join(runRoot, "runc-*"))
	for _, root := range roots {
		h := strings.TrimPrefix(filepath.Base(root), "runc-")
		removeNodeContainers(func(string, ...any) {}, root, node.ConmonState(h).Dir(), "/cje2e-"+filepath.Base(dir))
	}
}

// removeCgroupDir removes the cgroup directory dir, if it is there: a cgroup whose last
// process is still exiting is busy for a moment, so it tries for a second.
func removeCgroupDir(dir string) {
	for i := 0; i < 50; i++ {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func removeNodeContainers(logf func(string, ...any), runcRoot, stateDir, cgroupParent string) {
	for _, p := range leaks.Conmons(stateDir) {
		logf("cleanup: killing conmon %d: %s", p.PID, p.Cmdline)
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	ids, _ := runcList(runcRoot)
	for _, id := range ids {
		out, err := runcCmd("--root", runcRoot, "delete", "--force", id).CombinedOutput()
		logf("cleanup: runc delete --force %s: %v %s", id, err, out)
	}
	if isNodeSlice(cgroupParent) {
		// The node's slice, with what the test left in it (pods' slices, scopes): the
		// daemon stops the units it made, this one is the test's.
		stopNodeSlice(logf, strings.TrimPrefix(cgroupParent, "/"))
	}
	if strings.HasPrefix(cgroupParent, "/cje2e-") || isNodeSlice(cgroupParent) {
		dirs := cgroupDirs(cgroupParent)
		for _, h := range cgroupHierarchies() {
			dirs = append(dirs, filepath.Join(h, cgroupParent))
		}
		for _, dir := range dirs {
			removeCgroupDir(dir)
		}
	}
	if strings.HasPrefix(stateDir, "/run/cjo-") {
		if err := os.RemoveAll(stateDir); err != nil {
			logf("cleanup: %v", err)
		}
	}
}
