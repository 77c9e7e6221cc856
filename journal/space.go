package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// space keeps disk blocks allocated to the journal file ahead of its growth (its space
// reserve, Options.SpaceReserve), so that the commits that free a full disk (stops,
// removals, undos) still commit on it.
//
// Why: bbolt grows its file with ftruncate, which allocates nothing, and writes the new
// pages later; on a full disk that write fails, the commit fails, and the journal fails
// stop. The kubelet frees a full disk by stopping and removing pods, each a commit: on a
// full disk the daemon would stop at the first one that grows the file. Blocks allocated
// past the end of the file with fallocate(FALLOC_FL_KEEP_SIZE) stay with the file when
// bbolt's ftruncate takes its length over them, and bbolt's writes land in them without
// asking the file system for more (tmpfs, ext4 and xfs keep them so).
//
// The reserve is size bytes past the file's high-water mark (the end of its last page in
// use, which bbolt only moves up; pages freed below it are reused and need no reserve).
// After each commit that moved the mark, the blocks from the end of the last allocation
// to the mark plus size are allocated (a top-up). Allocated blocks stay with the file,
// across restarts; Open allocates from the file's start, so holes left by earlier growth
// are filled too.
//
// The journal is low on space while the reserve is short and cannot be topped up, or
// while the disk has less room than the reserve: then a creation could use the reserve
// up. Begin refuses creations then (ErrLowSpace); every other change commits into the
// reserve. A commit that needs more than is left fails as before (fail-stop).
type space struct {
	path string
	size int64
	f    *os.File
	log  *slog.Logger
	// fallocate allocates [off, off+n) of fd keeping its size; statfs reports the file
	// system of fd. Tests replace them (Options.fallocate).
	fallocate func(fd int, off, n int64) error
	statfs    func(fd int, st *unix.Statfs_t) error

	mu sync.Mutex
	// hw is the high-water mark as last seen, end how far from the file's start the
	// blocks are allocated as far as the last top-up knows.
	hw, end int64
	// short is why the last top-up failed, nil when it succeeded.
	short error
	// low is the low-space error as last reported, to log its changes once.
	low error
}

// newSpace opens the reserve of the journal file at path and tops it up to hw plus size.
// It returns nil, and no error, when size is 0 or the file system cannot preallocate
// (logged: then a full disk fails the journal, as without a reserve).
func newSpace(path string, size, hw int64, opts Options) (*space, error) {
	if size <= 0 {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open journal %s for its space reserve: %w", path, err)
	}
	s := &space{path: path, size: size, f: f, log: opts.Logger, fallocate: opts.fallocate, statfs: unix.Fstatfs}
	if s.fallocate == nil {
		s.fallocate = preallocate
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hw = hw
	if err := s.topUp(); errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		s.log.Warn("journal space reserve off: the file system cannot preallocate; a full disk will stop the daemon at its next commit that grows the journal",
			"path", path, "err", err)
		f.Close()
		return nil, nil
	}
	s.refresh()
	return s, nil
}

// committed is called by the committer after each commit: when the commit moved the
// high-water mark, the reserve is topped up.
func (s *space) committed(db *bolt.DB) {
	var hw int64
	if err := db.View(func(tx *bolt.Tx) error { hw = tx.Size(); return nil }); err != nil {
		return // the file is closing; there is nothing more to reserve for
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if hw <= s.hw {
		return
	}
	s.hw = hw
	s.refresh()
}

// check returns the low-space error (nil when the journal has room), topping up a short
// reserve and looking at the disk again first, so that space freed since shows at once.
func (s *space) check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refresh()
}

// refresh tops up a short reserve, looks at the disk's free space and returns the
// low-space error, logging when it appears and when it goes. The caller holds s.mu.
func (s *space) refresh() error {
	s.topUp()
	var low error
	var st unix.Statfs_t
	switch {
	case s.short != nil:
		low = fmt.Errorf("journal %s: %w: its %s space reserve is short by %s and the disk cannot give it back (%v); %s",
			s.path, ErrLowSpace, mib(s.size), mib(s.hw+s.size-s.end), s.short, lowSpaceAdvice)
	case s.statfs(int(s.f.Fd()), &st) == nil && int64(st.Bavail)*int64(st.Bsize) < s.size:
		low = fmt.Errorf("journal %s: %w: its disk has %s free, less than the journal's %s space reserve; %s",
			s.path, ErrLowSpace, mib(int64(st.Bavail)*int64(st.Bsize)), mib(s.size), lowSpaceAdvice)
	}
	switch {
	case low != nil && s.low == nil:
		s.log.Warn("journal low on disk space: new pods and containers are refused", "path", s.path, "err", low)
	case low == nil && s.low != nil:
		s.log.Info("journal has disk space again: new pods and containers are accepted", "path", s.path)
	}
	s.low = low
	return low
}

// lowSpaceAdvice ends every low-space error: what the operator does about it.
const lowSpaceAdvice = "new pods and containers are refused until space is freed on that disk (stops and removals still work)"

// topUp allocates the blocks up to the high-water mark plus size that the last top-up
// did not, and records the outcome in short. The caller holds s.mu.
func (s *space) topUp() error {
	want := s.hw + s.size
	if s.end >= want {
		s.short = nil
		return nil
	}
	if err := s.fallocate(int(s.f.Fd()), s.end, want-s.end); err != nil {
		s.short = &os.SyscallError{Syscall: "fallocate", Err: err}
		return s.short
	}
	s.end, s.short = want, nil
	return nil
}

// preallocate allocates [off, off+n) of fd without changing its size. A signal that
// interrupts it (tmpfs checks for one at every page) makes it start again.
func preallocate(fd int, off, n int64) error {
	for {
		err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err != unix.EINTR {
			return err
		}
	}
}

func (s *space) close() error {
	return s.f.Close()
}

// mib formats a size in bytes in MiB.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
