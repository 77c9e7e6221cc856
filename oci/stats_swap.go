package oci

import (
	"errors"
	"io/fs"
)

// Swap is what a container's cgroup says about its use of swap (the CRI's SwapUsage).
type Swap struct {
	// Usage is the swap the cgroup's processes use, in bytes.
	Usage uint64
	// Limit is how much swap they may use, in bytes; 0 when there is no limit.
	Limit uint64
}

// noLimit is the least figure that reads as "no limit": v1 writes the largest
// page-aligned value, v2 "max" (math.MaxUint64).
const noLimit = 1 << 62

// readSwap reads a cgroup's swap from its memory directory: on cgroup v2
// memory.swap.current and memory.swap.max; on v1 the memory+swap counters
// (memory.memsw.*, present only with swap accounting, swapaccount=1) less the memory
// ones. ok is false where the cgroup has no swap accounting (no such files) or no
// memory directory.
func (f *cgroupFiles) readSwap(d statDirs) (s Swap, ok bool, err error) {
	if d.memory == "" {
		return Swap{}, false, nil
	}
	defer func() {
		if errors.Is(err, fs.ErrNotExist) {
			s, ok, err = Swap{}, false, nil
		}
	}()
	if d.v2 {
		usage, err := f.uint(d.memory, "memory.swap.current")
		if err != nil {
			return Swap{}, false, err
		}
		limit, err := f.uint(d.memory, "memory.swap.max")
		if err != nil {
			return Swap{}, false, err
		}
		if limit >= noLimit {
			limit = 0
		}
		return Swap{Usage: usage, Limit: limit}, true, nil
	}
	var v [4]uint64
	for i, file := range []string{"memory.memsw.usage_in_bytes", "memory.usage_in_bytes", "memory.memsw.limit_in_bytes", "memory.limit_in_bytes"} {
		if v[i], err = f.uint(d.memory, file); err != nil {
			return Swap{}, false, err
		}
	}
	memsw, mem, memswLimit, memLimit := v[0], v[1], v[2], v[3]
	if memsw > mem {
		s.Usage = memsw - mem
	}
	if memswLimit < noLimit && memswLimit > memLimit {
		s.Limit = memswLimit - memLimit
	}
	return s, true, nil
}

// Available is what the limit leaves of the swap: 0 once the usage reaches it, and
// ok false without a limit.
func (s Swap) Available() (uint64, bool) {
	if s.Limit == 0 {
		return 0, false
	}
	if s.Usage >= s.Limit {
		return 0, true
	}
	return s.Limit - s.Usage, true
}
