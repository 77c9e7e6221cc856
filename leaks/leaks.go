// Package leaks finds what a crijournal node holds that its journal does not account for:
// it lists everything of the daemon's on the node (namespace pins and mounts, host-local
// IP files, veths on the CNI bridges, libcni cache entries, the pods' files, storage
// containers and layer directories, runtime containers, conmon processes and state,
// cgroups, journal records), says whose each is (the sandbox or container ID its name or
// content gives), and calls a leak what no journal record owns, what its record says is
// undone, and records left half done while the daemon is down. It reads; it removes
// nothing. `crijournal inspect --leaks` prints its Report; the end-to-end tests' leak
// check and the chaos soak use that command.
package leaks

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/moby/sys/mountinfo"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/layout"
)

// Kinds of Item.
const (
	KindPin              = "namespace pin"
	KindMount            = "mount"
	KindIP               = "IP allocation"
	KindInterface        = "interface"
	KindCNICache         = "CNI cache entry"
	KindPodFiles         = "pod files"
	KindStorageContainer = "storage container"
	KindLayerDir         = "storage layer directory"
	KindUsernsRootfs     = "user namespace root filesystem"
	KindRuntimeContainer = "runtime container"
	KindConmon           = "conmon process"
	KindConmonState      = "conmon state"
	KindCgroup           = "cgroup"
	KindRecord           = "journal record"
)

// Item is one thing of the daemon's on the node.
type Item struct {
	Kind string `json:"kind"`
	// What is where it is: a path; an interface's name, index and bridge; a process's
	// PID and command line; a record's kind, ID, name and state.
	What string `json:"what"`
	// Owner is the sandbox or container ID the item is of ("" when nothing says).
	Owner string `json:"owner,omitempty"`
	// Reason says why the item is a leak ("" for an item its record holds).
	Reason string `json:"reason,omitempty"`
}

func (i Item) String() string {
	s := i.Kind + " " + i.What
	if i.Owner != "" && !strings.Contains(i.What, i.Owner) {
		s += " of " + i.Owner
	}
	if i.Reason != "" {
		s += ": " + i.Reason
	}
	return s
}

// Report is what Find found: the leaks, and what the journal's records hold.
type Report struct {
	Leaks []Item `json:"leaks"`
	Held  []Item `json:"held"`
}

// Node is what Find looks at.
type Node struct {
	Layout layout.Node
	// Records are the journal's records, read from the daemon or from the file.
	Records []journal.Record
	// DaemonDown says that Records were read from the file: records in a state of work
	// under way (creating, undoing, removing) are then work left half done.
	DaemonDown bool
	// CgroupParents bound the search of cgroups to these parents (cgroupfs paths, such
	// as /kubepods, or slices' directories): there every directory is an item. Empty: the
	// whole hierarchy is searched for the daemon's own cgroups (crijournal-<ID>,
	// crijournal-conmon-<ID>, with .scope under systemd).
	CgroupParents []string
}

// idRE finds a sandbox's or container's ID in a name.
var idRE = regexp.MustCompile(`[0-9a-f]{64}`)

// Find lists what the node holds, and which of it leaked.
func Find(ctx context.Context, n Node) (Report, error) {
	f := finder{n: n, l: n.Layout}
	for _, step := range []func() error{
		f.pins, f.podFiles, f.networks, f.cniCache, f.storage, f.runtimes, f.cgroups, f.mounts,
	} {
		if err := ctx.Err(); err != nil {
			return Report{}, err
		}
		if err := step(); err != nil {
			return Report{}, err
		}
	}
	f.records()
	return f.classify(), nil
}

type finder struct {
	n      Node
	l      layout.Node
	items  []Item
	layers map[string]string // storage layer ID -> its container's ID
}

func (f *finder) add(kind, what, owner string) {
	f.items = append(f.items, Item{Kind: kind, What: what, Owner: owner})
}

// addFixed adds an item that is a leak whoever owns it.
func (f *finder) addFixed(kind, what, reason string) {
	f.items = append(f.items, Item{Kind: kind, What: what, Owner: idRE.FindString(what), Reason: reason})
}

// readDir lists dir; a missing dir is empty.
func readDir(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}

// entries adds an item per entry of dir, owned by the ID its name carries.
func (f *finder) entries(kind, dir string) error {
	list, err := readDir(dir)
	if err != nil {
		return err
	}
	for _, e := range list {
		f.add(kind, filepath.Join(dir, e.Name()), idRE.FindString(e.Name()))
	}
	return nil
}

// pins: a file per pinned namespace, mounted or not.
func (f *finder) pins() error {
	for _, kind := range layout.NamespaceKinds {
		if err := f.entries(KindPin, f.l.PinDir(kind)); err != nil {
			return err
		}
	}
	return nil
}

func (f *finder) podFiles() error { return f.entries(KindPodFiles, f.l.PodFilesDir()) }

// network is what the node's CNI configuration says of one network.
type network struct {
	name    string
	bridges []string // the bridge plugin's bridges
	ipamDir string   // host-local's directory of the network ("" when it uses none)
}

// cniNetworks reads every network of cni_conf_dir (not only the first: pods may be
// attached to one configured before).
func (f *finder) cniNetworks() ([]network, error) {
	if f.l.CNIConfDir == "" {
		return nil, nil
	}
	files, err := libcni.ConfFiles(f.l.CNIConfDir, []string{".conf", ".conflist", ".json"})
	if err != nil {
		return nil, fmt.Errorf("CNI configuration in %s: %w", f.l.CNIConfDir, err)
	}
	var out []network
	for _, file := range files {
		// A list of plugins (.conflist), or one plugin (.conf, .json).
		data, err := os.ReadFile(file)
		if err != nil {
			continue // gone meanwhile
		}
		var conf struct {
			Name    string            `json:"name"`
			Plugins []json.RawMessage `json:"plugins"`
		}
		if json.Unmarshal(data, &conf) != nil {
			continue // the daemon says so; a network that does not parse has no pods
		}
		plugins := conf.Plugins
		if plugins == nil {
			plugins = []json.RawMessage{data}
		}
		name := conf.Name
		nw := network{name: name}
		for _, b := range plugins {
			var p struct {
				Type   string `json:"type"`
				Bridge string `json:"bridge"`
				IPAM   struct {
					Type    string `json:"type"`
					DataDir string `json:"dataDir"`
				} `json:"ipam"`
			}
			if json.Unmarshal(b, &p) != nil {
				continue
			}
			if p.Type == "bridge" {
				nw.bridges = append(nw.bridges, cmp.Or(p.Bridge, "cni0"))
			}
			if p.IPAM.Type == "host-local" {
				nw.ipamDir = filepath.Join(cmp.Or(p.IPAM.DataDir, layout.DefaultHostLocalDataDir), name)
			}
		}
		out = append(out, nw)
	}
	return out, nil
}

// networks: host-local's IP files and the veths on the networks' bridges.
func (f *finder) networks() error {
	nws, err := f.cniNetworks()
	if err != nil {
		return err
	}
	bridges := map[string]bool{}
	for _, nw := range nws {
		for _, b := range nw.bridges {
			bridges[b] = true
		}
		if nw.ipamDir == "" {
			continue
		}
		if err := f.ipFiles(nw.ipamDir); err != nil {
			return err
		}
	}
	if len(bridges) == 0 {
		return nil
	}
	return f.interfaces(bridges)
}

// ipFiles: host-local's allocations, one file per IP holding the owner's ID.
func (f *finder) ipFiles(dir string) error {
	list, err := readDir(dir)
	if err != nil {
		return err
	}
	for _, e := range list {
		if e.Name() == "lock" || strings.HasPrefix(e.Name(), "last_reserved_ip") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue // released meanwhile
		}
		if err != nil {
			return err
		}
		owner, _, _ := strings.Cut(string(b), "\n")
		f.add(KindIP, p, idRE.FindString(owner))
	}
	return nil
}

// interfaces: the ports of the bridges, each owned by the sandbox whose pinned network
// namespace holds its peer.
func (f *finder) interfaces(bridges map[string]bool) error {
	links, err := listLinks(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("list the node's interfaces: %w", err)
	}
	byIndex := map[int]string{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l.Attrs().Name
	}
	peers := f.sandboxPeers()
	for _, l := range links {
		a := l.Attrs()
		if a.MasterIndex == 0 || !bridges[byIndex[a.MasterIndex]] {
			continue
		}
		f.add(KindInterface, fmt.Sprintf("%s (index %d) on bridge %s", a.Name, a.Index, byIndex[a.MasterIndex]), peers[a.Index])
	}
	return nil
}

// linkDumps is how many link dumps listLinks makes before it gives up on a node whose
// interfaces keep changing.
const linkDumps = 10

// listLinks returns what list (a netlink link dump) answers, dumping again while a change
// of the links interrupts the dump (netlink.ErrDumpInterrupted: the answer may miss links,
// so a port would pass for nobody's). On a busy node the CNI plugins add and remove veths
// all the time; a short pause between the dumps lets a burst of them end.
func listLinks(list func() ([]netlink.Link, error)) ([]netlink.Link, error) {
	for i := range linkDumps {
		links, err := list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return links, err
		}
		time.Sleep(time.Duration(i+1) * 5 * time.Millisecond)
	}
	return nil, fmt.Errorf("the interfaces changed during each of %d dumps in a row: run the check again when the node is quieter", linkDumps)
}

// sandboxPeers maps the host's index of the peer of each pinned network namespace's
// interfaces to the sandbox.
func (f *finder) sandboxPeers() map[int]string {
	out := map[int]string{}
	pins, _ := readDir(f.l.PinDir("net"))
	for _, e := range pins {
		ns, err := vnetns.GetFromPath(filepath.Join(f.l.PinDir("net"), e.Name()))
		if err != nil {
			continue // a pin whose namespace is gone: listed with the pins
		}
		h, err := netlink.NewHandleAt(ns)
		ns.Close()
		if err != nil {
			continue
		}
		links, err := listLinks(h.LinkList)
		h.Close()
		if err != nil {
			continue
		}
		for _, l := range links {
			if l.Type() == "veth" && l.Attrs().ParentIndex > 0 {
				out[l.Attrs().ParentIndex] = e.Name()
			}
		}
	}
	return out
}

// cniCache: libcni's cached results (and anything else in its cache but host-local's
// directories, listed as IP allocations).
func (f *finder) cniCache() error {
	dir := f.l.CNICache()
	skip := map[string]bool{}
	nws, _ := f.cniNetworks()
	for _, nw := range nws {
		if nw.ipamDir != "" {
			skip[filepath.Dir(nw.ipamDir)] = true
		}
	}
	shared := f.l.CNICacheDir == ""
	if shared {
		// libcni's default directory is shared with the node's other runtimes and with
		// host-local: only its results of this node's networks are the daemon's.
		dir = f.l.CNIResultsDir()
	}
	ours := func(name string) bool {
		return !shared || slices.ContainsFunc(nws, func(nw network) bool { return strings.HasPrefix(name, nw.name+"-") })
	}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if e.IsDir() {
			if skip[p] {
				return filepath.SkipDir
			}
			return nil
		}
		if ours(e.Name()) {
			f.add(KindCNICache, p, idRE.FindString(e.Name()))
		}
		return nil
	})
	return err
}

// storage: containers/storage's containers (in the graph root, or in the run root with
// the transient store), the layer directories no layer record names, and the bind
// mounts' directories of user-namespace root filesystems. The store is not opened (a
// running daemon holds its locks): its JSON files are read.
func (f *finder) storage() error {
	roots := []string{f.l.StorageRootDir(), f.l.StorageRunRootDir()}
	f.layers = map[string]string{}
	type record struct {
		ID    string `json:"id"`
		Layer string `json:"layer"`
	}
	read := func(pattern string) ([]record, error) {
		var out []record
		for _, root := range roots {
			files, _ := filepath.Glob(filepath.Join(root, pattern))
			for _, file := range files {
				b, err := os.ReadFile(file)
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				if err != nil {
					return nil, err
				}
				var rs []record
				if len(bytes.TrimSpace(b)) > 0 {
					if err := json.Unmarshal(b, &rs); err != nil {
						return nil, fmt.Errorf("%s: %w", file, err)
					}
				}
				out = append(out, rs...)
			}
		}
		return out, nil
	}
	var containers []record
	for _, name := range []string{"containers.json", "volatile-containers.json"} {
		rs, err := read(filepath.Join("*-containers", name))
		if err != nil {
			return err
		}
		containers = append(containers, rs...)
	}
	for _, c := range containers {
		f.add(KindStorageContainer, c.ID, c.ID)
		if c.Layer != "" {
			f.layers[c.Layer] = c.ID
		}
	}
	recorded := map[string]bool{}
	for _, name := range []string{"layers.json", "volatile-layers.json"} {
		rs, err := read(filepath.Join("*-layers", name))
		if err != nil {
			return err
		}
		for _, r := range rs {
			recorded[r.ID] = true
		}
	}
	for _, dir := range []string{filepath.Join(f.l.StorageRootDir(), "overlay"), filepath.Join(f.l.StorageRootDir(), "vfs", "dir")} {
		list, err := readDir(dir)
		if err != nil {
			return err
		}
		for _, e := range list {
			if e.IsDir() && len(e.Name()) == 64 && !recorded[e.Name()] {
				f.addFixed(KindLayerDir, filepath.Join(dir, e.Name()), "no layer record names it (a container's root filesystem left behind)")
			}
		}
	}
	return f.entries(KindUsernsRootfs, f.l.UsernsRootfsDir())
}

// runtimes: for each handler, the OCI runtime's containers (a directory each in its
// root), conmon's state, and the live conmon processes of its state directory.
func (f *finder) runtimes() error {
	for _, h := range f.l.Handlers() {
		list, err := readDir(f.l.RuntimeRoot(h))
		if err != nil {
			return err
		}
		for _, e := range list {
			if e.IsDir() {
				f.add(KindRuntimeContainer, e.Name()+" ("+h+", "+filepath.Join(f.l.RuntimeRoot(h), e.Name())+")", idRE.FindString(e.Name()))
			}
		}
		state := f.l.ConmonState(h)
		for _, dir := range state.Subdirs() {
			if err := f.entries(KindConmonState, dir); err != nil {
				return err
			}
		}
		for _, p := range Conmons(state.Dir()) {
			f.add(KindConmon, fmt.Sprintf("%d: %s", p.PID, p.Cmdline), p.ID)
		}
	}
	return nil
}

// Conmon is a live conmon process: its PID, its command line (arguments joined by
// spaces) and the container ID it names, if any.
type Conmon struct {
	PID         int
	Cmdline, ID string
}

// Conmons lists the live processes whose command line names the state directory: the
// conmons of a handler (or a wrapper of conmon, before it execs conmon). A zombie is left
// out by that test alone: its command line reads empty.
func Conmons(stateDir string) []Conmon {
	list, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	needle := []byte(stateDir + "/")
	var out []Conmon
	for _, e := range list {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(raw, needle) {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		id := ""
		if i := slices.Index(args, "-c"); i >= 0 && i+1 < len(args) {
			id = args[i+1]
		}
		out = append(out, Conmon{PID: pid, Cmdline: strings.Join(args, " "), ID: cmp.Or(idRE.FindString(id), idRE.FindString(string(raw)))})
	}
	return out
}

// cgroupHierarchies lists the mounted cgroup hierarchies: the unified one on a cgroup v2
// node, else each controller's.
func cgroupHierarchies() []string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return []string{"/sys/fs/cgroup"}
	}
	hs, _ := filepath.Glob("/sys/fs/cgroup/*")
	return hs
}

// ownCgroupRE matches the names of the daemon's cgroups: a container's or pause
// process's, and a conmon's.
var ownCgroupRE = regexp.MustCompile(`^crijournal-(conmon-)?[0-9a-f]{64}(\.scope)?$`)

func (f *finder) cgroups() error {
	for _, h := range cgroupHierarchies() {
		if len(f.n.CgroupParents) == 0 {
			err := filepath.WalkDir(h, func(p string, e fs.DirEntry, err error) error {
				if err != nil || !e.IsDir() {
					return nil
				}
				if ownCgroupRE.MatchString(e.Name()) {
					f.add(KindCgroup, p, idRE.FindString(e.Name()))
				}
				return nil
			})
			if err != nil {
				return err
			}
			continue
		}
		for _, parent := range f.n.CgroupParents {
			root := filepath.Join(h, parent)
			_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
				if err == nil && e.IsDir() && p != root {
					f.add(KindCgroup, p, idRE.FindString(e.Name()))
				}
				return nil
			})
		}
	}
	return nil
}

// mountDirs are the node's directories below which every mount is the daemon's.
func (f *finder) mountDirs() []string {
	dirs := []string{f.l.Root, f.l.RunRoot, f.l.NamespaceDir, f.l.StorageRootDir(), f.l.StorageRunRootDir()}
	for _, h := range f.l.Handlers() {
		dirs = append(dirs, f.l.RuntimeRoot(h), f.l.ConmonState(h).Dir())
	}
	for i, d := range dirs {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			dirs[i] = r // the mount table names /run, not /var/run
		}
	}
	// One directory below another is searched with it.
	slices.Sort(dirs)
	var out []string
	for _, d := range slices.Compact(dirs) {
		if d == "" || d == "/" {
			continue
		}
		if len(out) > 0 && strings.HasPrefix(d, out[len(out)-1]+"/") {
			continue
		}
		out = append(out, d)
	}
	return out
}

// MountDirs are the directories below which Find lists every mount but the node's own
// (namespace directories, the overlay driver's home).
func MountDirs(l layout.Node) []string { return (&finder{l: l}).mountDirs() }

// mounts: every mount below the node's directories, but the namespace directories
// themselves (a runtime may make them mount points, shared or private) and the overlay
// driver's home (mounted private once and left).
func (f *finder) mounts() error {
	dirs := f.mountDirs()
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		for _, d := range dirs {
			if m.Mountpoint == d || strings.HasPrefix(m.Mountpoint, d+"/") {
				return false, false
			}
		}
		return true, false
	})
	if err != nil {
		return fmt.Errorf("read the mount table: %w", err)
	}
	own := map[string]bool{}
	for _, d := range []string{f.l.NamespaceDir, filepath.Join(f.l.StorageRootDir(), "overlay"),
		f.l.Root, f.l.RunRoot, f.l.StorageRootDir(), f.l.StorageRunRootDir()} {
		own[d] = true
		if r, err := filepath.EvalSymlinks(d); err == nil {
			own[r] = true
		}
	}
	for _, k := range layout.NamespaceKinds {
		own[f.l.PinDir(k)] = true
		if r, err := filepath.EvalSymlinks(f.l.PinDir(k)); err == nil {
			own[r] = true
		}
	}
	for _, m := range infos {
		if own[m.Mountpoint] {
			continue
		}
		owner := idRE.FindString(filepath.Base(m.Mountpoint))
		for _, id := range idRE.FindAllString(m.Mountpoint, -1) {
			if c, ok := f.layers[id]; ok {
				owner = c // a container's root filesystem, named by its layer
				break
			}
			if owner == "" {
				owner = id
			}
		}
		f.add(KindMount, m.Mountpoint, owner)
	}
	return nil
}

// records: every journal record is an item; one in a state of work under way is a leak
// while the daemon is down.
func (f *finder) records() {
	for _, r := range f.n.Records {
		what := fmt.Sprintf("%s %s %q (%s", r.Kind, r.ID, r.Name, r.State)
		if r.Parent != "" {
			what += ", of sandbox " + r.Parent
		}
		what += ")"
		item := Item{Kind: KindRecord, What: what, Owner: r.ID}
		if f.n.DaemonDown && unfinished(r.State) {
			item.Reason = "left " + string(r.State) + " (stage " + cmp.Or(r.Stage, "none") + "): the next start of the daemon recovers it"
		}
		f.items = append(f.items, item)
	}
}

// unfinished reports whether a record in state s is work under way.
func unfinished(s journal.State) bool {
	return s == journal.StateCreating || s == journal.StateUndoing || s == journal.StateRemoving
}

// classify tells the leaks from what records hold.
func (f *finder) classify() Report {
	byID := map[string]journal.Record{}
	for _, r := range f.n.Records {
		byID[r.ID] = r
	}
	var rep Report
	for _, it := range f.items {
		if it.Reason == "" {
			r, ok := byID[it.Owner]
			switch {
			case it.Owner == "":
				it.Reason = "no sandbox or container ID names it"
			case !ok:
				it.Reason = "no journal record of " + it.Owner
			default:
				if s, undone := undoneStep(r, it.What); undone {
					it.Reason = fmt.Sprintf("its record's step %d (%s) is undone", s.Seq, s.Kind)
				}
			}
		}
		if it.Reason != "" {
			rep.Leaks = append(rep.Leaks, it)
		} else {
			rep.Held = append(rep.Held, it)
		}
	}
	order := func(a, b Item) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.What, b.What)) }
	slices.SortFunc(rep.Leaks, order)
	slices.SortFunc(rep.Held, order)
	if rep.Leaks == nil {
		rep.Leaks = []Item{}
	}
	if rep.Held == nil {
		rep.Held = []Item{}
	}
	return rep
}

// ArgPath is the argument of a step that names the path of what the step made (a
// pinned namespace, a pod's file, its /dev/shm mount), as the steps of netns write it.
// Other arguments may name paths the step only used (CNI ADD's network namespace).
const ArgPath = "path"

// undoneStep finds the last step of r whose ArgPath is what, and reports whether it is
// undone: the record says the node no longer holds it.
func undoneStep(r journal.Record, what string) (journal.Step, bool) {
	var last journal.Step
	found := false
	for _, s := range r.Steps {
		if s.Args[ArgPath] == what && (!found || s.Seq > last.Seq) {
			last, found = s, true
		}
	}
	return last, found && last.Status == journal.StepUndone
}
