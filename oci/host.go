package oci

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// readHost gathers the facts about the daemon and the machine that a spec depends on.
func readHost() (host, error) {
	h := host{devices: hostDevices, seccomp: kernelSeccomp(), apparmor: readAppArmor()}
	caps, err := boundingSet()
	if err != nil {
		return host{}, err
	}
	for i, name := range capNames {
		if caps&(1<<uint(i)) != 0 {
			h.bounding = append(h.bounding, name)
		}
	}
	b, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		return host{}, fmt.Errorf("read own oom_score_adj: %w", err)
	}
	if h.oomScoreAdj, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
		return host{}, fmt.Errorf("parse own oom_score_adj %q: %w", b, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		h.cgroup2 = true
		ctrls, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		for _, c := range strings.Fields(string(ctrls)) {
			if c == "hugetlb" {
				h.hugetlb = true
			}
		}
		h.swap = true
	} else {
		h.hugetlb = exists("/sys/fs/cgroup/hugetlb")
		h.swap = exists("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	}
	return h, nil
}

// boundingSet returns the daemon's capability bounding set (CapBnd in
// /proc/self/status) as a bit mask.
func boundingSet() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read own capabilities: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("parse CapBnd %q: %w", v, err)
			}
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read own capabilities: %w", err)
	}
	return 0, fmt.Errorf("no CapBnd in /proc/self/status")
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
