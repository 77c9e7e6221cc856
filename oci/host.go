package oci

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/oci/spec"
)

// readHost gathers the facts about the daemon and the machine that a spec depends on.
func readHost() (spec.Host, error) {
	h := spec.Host{User: resolveUser, Devices: spec.HostDevices, Seccomp: kernelSeccomp(), AppArmor: readAppArmor(), ThermalThrottle: thermalThrottlePaths()}
	caps, err := ownCapabilities("CapBnd", "CapEff")
	if err != nil {
		return spec.Host{}, err
	}
	for i, name := range spec.CapNames {
		if caps[0]&(1<<uint(i)) != 0 {
			h.Bounding = append(h.Bounding, name)
		}
	}
	h.SysResource = caps[1]&(1<<unix.CAP_SYS_RESOURCE) != 0
	if h.OOMScoreAdj, err = ownOOMScoreAdj(); err != nil {
		return spec.Host{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		h.Cgroup2 = true
		ctrls, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		for _, c := range strings.Fields(string(ctrls)) {
			if c == "hugetlb" {
				h.Hugetlb = true
			}
		}
		h.Swap = true
	} else {
		h.Hugetlb = exists("/sys/fs/cgroup/hugetlb")
		h.Swap = exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	}
	return h, nil
}

// ownOOMScoreAdj returns the daemon's own oom_score_adj.
func ownOOMScoreAdj() (int, error) {
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return 0, fmt.Errorf("read own oom_score_adj: %w", err)
	}
	adj, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse own oom_score_adj %q: %w", b, err)
	}
	return adj, nil
}

// ownCapabilities returns the daemon's capability sets named by fields of
// /proc/self/status ("CapBnd", "CapEff", ...) as bit masks, in the order asked.
func ownCapabilities(fields ...string) ([]uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, fmt.Errorf("read own capabilities: %w", err)
	}
	defer f.Close()
	out := make([]uint64, len(fields))
	found := make([]bool, len(fields))
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		i := slices.Index(fields, name)
		if i < 0 {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %s %q: %w", name, v, err)
		}
		out[i], found[i] = n, true
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read own capabilities: %w", err)
	}
	if i := slices.Index(found, false); i >= 0 {
		return nil, fmt.Errorf("no %s in /proc/self/status", fields[i])
	}
	return out, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
