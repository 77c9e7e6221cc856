package test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

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
// kept sandbox.
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
	var leaks []string

	// Namespace pins (files, mounted or not).
	for _, kind := range []string{"netns", "ipcns", "utsns", "pidns"} {
		dir := filepath.Join(d.nsDir, kind)
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !kept(e.Name()) {
				p := filepath.Join(dir, e.Name())
				leaks = append(leaks, fmt.Sprintf("namespace pin %s (a live namespace: %v)", p, isNamespace(p)))
			}
		}
	}

	// Mounts under the namespace directory. The directories themselves may
	// be mount points (a runtime may make them shared or private).
	for _, m := range mountsBelow(d.nsDir) {
		switch m {
		case d.nsDir, filepath.Join(d.nsDir, "netns"), filepath.Join(d.nsDir, "ipcns"), filepath.Join(d.nsDir, "utsns"), filepath.Join(d.nsDir, "pidns"):
			continue
		}
		if !kept(filepath.Base(m)) {
			leaks = append(leaks, "mount "+m)
		}
	}

	// host-local's IP allocations: one file per IP holding the owner's ID.
	for ip, owner := range d.ipamAllocations(t) {
		if !kept(owner) {
			leaks = append(leaks, fmt.Sprintf("IP allocation %s of %s (%s)", ip, owner, filepath.Join(d.ipamDir, d.network, ip)))
		}
	}

	// veths on the test bridge: the host end of each kept sandbox's eth0 is
	// allowed, found through the peer index of eth0 in its namespace.
	keptIfindex := map[string]bool{}
	for _, id := range keep {
		if !isNamespace(d.netnsPin(id)) {
			continue
		}
		out, err := exec.Command("nsenter", "--net="+d.netnsPin(id), "ip", "-o", "link", "show", "eth0").CombinedOutput()
		if err != nil {
			continue // a kept sandbox with no network (stopped, host network)
		}
		if m := peerRE.FindStringSubmatch(string(out)); m != nil {
			keptIfindex[m[1]] = true
		}
	}
	for _, v := range d.bridgePorts(t) {
		if !keptIfindex[v.index] {
			leaks = append(leaks, fmt.Sprintf("interface %s (index %s) on bridge %s", v.name, v.index, d.bridge))
		}
	}

	// libcni's cache of ADD results (needed for DEL).
	_ = filepath.WalkDir(d.cacheDir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return nil
		}
		if !kept(e.Name()) {
			leaks = append(leaks, "CNI cache entry "+p)
		}
		return nil
	})

	// Containers: runtime containers, conmons, storage containers, cgroups,
	// conmon's state files, mounts (see container_test.go).
	leaks = append(leaks, d.containerLeaks(t, kept)...)

	// The journal, when it can be read (the daemon holds its lock).
	if alive, _ := d.running(); !alive {
		if _, err := os.Stat(d.journalPath()); err == nil {
			for _, r := range d.records(t) {
				if !slices.Contains(keep, r.ID) && !slices.Contains(keep, r.Parent) {
					leaks = append(leaks, "journal record "+describeRecord(r))
				}
			}
		}
	}
	slices.Sort(leaks)
	return leaks
}

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
