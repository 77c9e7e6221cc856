package test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// nodeState is what the end-to-end tests could leave on the machine outside the
// directories each test checks itself: network links, mounts and node directories under
// the temporary directory where the tests' nodes live, and the conmon state directories
// the daemons make under /run when a node's run_root is too long for conmon's sockets. TestMain takes it before
// the tests and compares after them, so that a leak no per-test check knows about
// (a bridge left by a test that stopped early, a mount outside a node's own checks, a
// node its cleanup did not remove) still fails the suite.
type nodeState struct {
	links     []string // network interfaces of the host
	mounts    []string // mount points under the tests' temporary directory
	nodes     []string // node directories made by this test process
	stateDirs []string // conmon state directories under /run (a long run_root's)
	slices    []string // the nodes' systemd slices (with the systemd driver)
}

func takeNodeState() nodeState {
	var s nodeState
	if ifs, err := net.Interfaces(); err == nil {
		for _, i := range ifs {
			s.links = append(s.links, i.Name)
		}
	}
	prefix := filepath.Join(os.TempDir(), "cj")
	for _, mp := range mountsBelow(os.TempDir()) {
		if strings.HasPrefix(mp, prefix) {
			s.mounts = append(s.mounts, mp)
		}
	}
	s.stateDirs, _ = filepath.Glob("/run/cjo-*")
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "cj*"))
	for _, dir := range dirs {
		if owner, err := os.ReadFile(filepath.Join(dir, ownerFile)); err == nil && string(owner) == selfOwner() {
			s.nodes = append(s.nodes, dir)
		}
	}
	s.slices = nodeSlices()
	return s
}

// leftSince lists what is in s but was not in before: links of the tests' own naming
// (the bridges cjt*; pods' veths die with their namespaces, asynchronously, and each
// test checks its bridge has none), mounts, and node directories.
func (s nodeState) leftSince(before nodeState) []string {
	var out []string
	for _, l := range s.links {
		if !slices.Contains(before.links, l) && strings.HasPrefix(l, "cjt") {
			out = append(out, "network link "+l)
		}
	}
	for _, m := range s.mounts {
		if !slices.Contains(before.mounts, m) {
			out = append(out, "mount "+m)
		}
	}
	for _, n := range s.nodes {
		out = append(out, "node directory "+n)
	}
	for _, d := range s.stateDirs {
		if !slices.Contains(before.stateDirs, d) {
			out = append(out, "conmon state directory "+d)
		}
	}
	for _, sl := range s.slices {
		if !slices.Contains(before.slices, sl) {
			out = append(out, "systemd unit "+sl)
		}
	}
	return out
}
