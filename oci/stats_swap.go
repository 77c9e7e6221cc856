package oci

import (
	"errors"
	"io/fs"

	"github.com/opencontainers/cgroups"
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
// ones, mem, which readStats has just read (memory.usage_in_bytes and
// memory.limit_in_bytes: two files a container fewer for ListContainerStats). ok is false
// where the cgroup has no swap accounting (no such files), no memory directory, or (v1)
// no memory figures (mem's limit is never 0 once read).
func (f *cgroupFiles) readSwap(d statDirs, mem cgroups.MemoryData) (s Swap, ok bool, err error) {
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
	if mem.Limit == 0 {
		return Swap{}, false, nil
	}
	memsw, err := f.uint(d.memory, "memory.memsw.usage_in_bytes")
	if err != nil {
		return Swap{}, false, err
	}
	memswLimit, err := f.uint(d.memory, "memory.memsw.limit_in_bytes")
	if err != nil {
		return Swap{}, false, err
	}
	if memsw > mem.Usage {
		s.Usage = memsw - mem.Usage
	}
	if memswLimit < noLimit && memswLimit > mem.Limit {
		s.Limit = memswLimit - mem.Limit
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
