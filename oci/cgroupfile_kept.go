package oci

import (
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// keptFiles holds the files of one container's cgroup open between the reads of Stats,
// CPUUsage and Metrics, which the kubelet's poll makes every few seconds for every
// container:
// a read through a kept descriptor is one pread, where opening the file each time is an
// open (a path walk in the cgroup file system), two reads and a close. With the seven
// files of a container's stats on cgroup v1, 69 µs become 16 (docs/BENCHMARKS.md, "The
// idle poll: cgroup files kept open").
//
// A kept descriptor outlives nothing that matters: a cgroup is removed while its files
// are open (the kernel deactivates them, and a read then fails with ENODEV: readKept
// closes that descriptor and the path is opened again, which fails as it would have).
// The descriptors are closed when the container is forgotten (cgroupManagers.forget, at
// Release and Delete).
type keptFiles struct {
	// mu is held by the one reader reading through these files (cgroupFiles.use) and
	// by close, so that no descriptor is closed, or its number reused, under a read.
	mu     sync.Mutex
	fds    map[string]int // by path
	closed bool
	budget *fdBudget
}

// keepable says whether a file of a cgroup may be kept open: every file this package
// reads except the process lists, whose reads are not one record (see readKept).
func keepable(file string) bool {
	return file != "cgroup.procs" && file != "cgroup.threads"
}

// use makes f read through k until done is called; k is locked meanwhile. A nil k
// keeps nothing.
func (f *cgroupFiles) use(k *keptFiles) (done func()) {
	if k == nil {
		return func() {}
	}
	k.mu.Lock()
	f.kept = k
	return func() {
		f.kept = nil
		k.mu.Unlock()
	}
}

// keep takes fd as path's kept descriptor, and says whether it did: not once k is
// closed, nor past the budget (the caller then closes fd itself).
func (k *keptFiles) keep(path string, fd int) bool {
	if k.closed || !k.budget.take() {
		return false
	}
	if k.fds == nil {
		k.fds = map[string]int{}
	}
	k.fds[path] = fd
	return true
}

// drop closes and forgets path's descriptor.
func (k *keptFiles) drop(path string) {
	if fd, ok := k.fds[path]; ok {
		unix.Close(fd)
		delete(k.fds, path)
		k.budget.give(1)
	}
}

// dropDir closes and forgets the descriptors of the files of dir.
func (k *keptFiles) dropDir(dir string) {
	for path := range k.fds {
		if filepath.Dir(path) == dir {
			k.drop(path)
		}
	}
}

// close closes every kept descriptor, once no read is using them, and keeps no more.
func (k *keptFiles) close() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, fd := range k.fds {
		unix.Close(fd)
	}
	k.budget.give(len(k.fds))
	k.fds, k.closed = nil, true
}

// fdBudget bounds the descriptors a runtime keeps open across its containers: a
// quarter of the daemon's soft RLIMIT_NOFILE (Go raises it to the hard limit at start),
// at most maxKeptFiles. A container read past it opens and closes its files as before.
type fdBudget struct {
	mu        sync.Mutex
	used, max int
	once      sync.Once
}

// maxKeptFiles is the most descriptors a runtime keeps: ten files for each of 6,500
// containers on cgroup v2, far beyond what a node runs.
const maxKeptFiles = 65536

func (b *fdBudget) take() bool {
	b.once.Do(func() {
		var lim unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
			b.max = int(min(lim.Cur/4, maxKeptFiles))
		}
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used >= b.max {
		return false
	}
	b.used++
	return true
}

func (b *fdBudget) give(n int) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}
