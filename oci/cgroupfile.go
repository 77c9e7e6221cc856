package oci

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"

	"github.com/opencontainers/cgroups/fscommon"
	"golang.org/x/sys/unix"
)

// cgroupFiles reads the small files of a cgroup for Stats and Metrics: about 5 files a
// container for ListContainerStats and 15 for ListPodSandboxMetrics with every group, so
// 500 and 1,500 reads a call with 100 containers. The library's reader
// (cgroups.ReadFile) wraps each in an *os.File (an fcntl, a finalizer) and reads it into
// a fresh bytes.Buffer, then copies it into a string: about a quarter of the reads' CPU
// in ListPodSandboxMetrics (docs/BENCHMARKS.md, "The idle poll, call by call").
// cgroupFiles makes the open, read and close system calls and nothing else, into one
// buffer it keeps (take one from cgroupFilesPool, give it back), and parses as the
// library does (fscommon.GetCgroupParamUint, fscommon.ParseKeyValue). The file names are
// this package's constants, joined to the directories the library resolved; errors are
// *os.PathError, so a missing file is fs.ErrNotExist as with the library.
type cgroupFiles struct {
	// kept, when set, holds the files of the cgroup being read open between reads
	// (keptFiles); nil reads open and close each file.
	kept *keptFiles
	buf  []byte
	// keys interns the keys of flat-keyed files (memory.stat has ~40 a container):
	// the same strings every call rather than new ones.
	keys map[string]string
	// dents and names are openFiles' directory buffer and names.
	dents []byte
	names []string
}

var cgroupFilesPool = sync.Pool{New: func() any { return &cgroupFiles{buf: make([]byte, 0, 4096)} }}

// read returns the contents of dir/file, valid until the next read.
func (f *cgroupFiles) read(dir, file string) ([]byte, error) {
	path := filepath.Join(dir, filepath.Clean("/"+file))
	kept := f.kept != nil && keepable(file)
	if kept {
		if b, ok := f.readKept(path); ok {
			return b, nil
		}
	}
	fd, err := openRetry(path)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if kept && f.kept.keep(path, fd) {
		if b, ok := f.readKept(path); ok {
			return b, nil
		}
		// Unreadable at once (readKept closed it): read it again below, through a
		// descriptor of its own, for the error.
		if fd, err = openRetry(path); err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
	defer unix.Close(fd)
	return f.fill(path, fd, false)
}

// readKept reads path through the descriptor f.kept holds for it, from the start,
// which makes the kernel show the file afresh (a cgroup file is a seq_file that starts
// over when read at another offset than where its last read ended). ok is false when
// no descriptor is kept for path, or when it could not be read: that descriptor is then
// closed and forgotten (with those of its directory on ENODEV, which says the cgroup
// was removed), and the caller opens the path again, which says what became of it.
func (f *cgroupFiles) readKept(path string) (b []byte, ok bool) {
	fd, ok := f.kept.fds[path]
	if !ok {
		return nil, false
	}
	b, err := f.fill(path, fd, true)
	if err != nil {
		f.kept.drop(path)
		if errors.Is(err, unix.ENODEV) { // the cgroup was removed: its other files too
			f.kept.dropDir(filepath.Dir(path))
		}
		return nil, false
	}
	return b, true
}

// fill reads the file open as fd into f's buffer: a descriptor just opened read to its
// end, a kept one (kept) with preads from offset 0. The files kept hold one record each
// (keepable), which a read shows whole: a pread that leaves room in the buffer has read
// all of it, and needs no second one to see the end of the file.
func (f *cgroupFiles) fill(path string, fd int, kept bool) ([]byte, error) {
	b := f.buf[:0]
	defer func() { f.buf = b }()
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		var n int
		var err error
		if kept {
			n, err = unix.Pread(fd, b[len(b):cap(b)], int64(len(b)))
		} else {
			n, err = unix.Read(fd, b[len(b):cap(b)])
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		b = b[:len(b)+n]
		if n == 0 || (kept && len(b) < cap(b)) {
			return b, nil
		}
	}
}

func openRetry(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// string is read as a string (a copy).
func (f *cgroupFiles) string(dir, file string) (string, error) {
	b, err := f.read(dir, file)
	return string(b), err
}

// uint reads a file of one number as fscommon.GetCgroupParamUint does: "max" is
// math.MaxUint64, a negative number 0.
func (f *cgroupFiles) uint(dir, file string) (uint64, error) {
	b, err := f.read(dir, file)
	if err != nil {
		return 0, err
	}
	b = bytes.TrimSpace(b)
	if string(b) == "max" {
		return math.MaxUint64, nil
	}
	v, err := fscommon.ParseUint(string(b), 10, 64)
	if err != nil {
		return v, &fscommon.ParseError{Path: dir, File: file, Err: err}
	}
	return v, nil
}

// keyValues reads a flat-keyed file (memory.stat, cpu.stat), every line parsed as
// fscommon.ParseKeyValue parses it.
func (f *cgroupFiles) keyValues(dir, file string) (map[string]uint64, error) {
	b, err := f.read(dir, file)
	if err != nil {
		return nil, err
	}
	kv := make(map[string]uint64, bytes.Count(b, []byte("\n")))
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		k, v, ok := bytes.Cut(line, []byte(" "))
		if !ok || len(k) == 0 || len(v) == 0 {
			return nil, fmt.Errorf("cgroup %s/%s: line %q is not in \"key value\" format", dir, file, line)
		}
		n, err := fscommon.ParseUint(string(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("cgroup %s/%s: %w", dir, file, err)
		}
		kv[f.key(k)] = n
	}
	return kv, nil
}

// key returns k as a string, the same one every time.
func (f *cgroupFiles) key(k []byte) string {
	if s, ok := f.keys[string(k)]; ok {
		return s
	}
	if f.keys == nil {
		f.keys = map[string]string{}
	}
	if len(f.keys) >= 1024 { // not the files this package reads: do not grow for them
		return string(k)
	}
	s := string(k)
	f.keys[s] = s
	return s
}

// lines counts the lines of a file (cgroup.procs).
func (f *cgroupFiles) lines(dir, file string) (uint64, error) {
	b, err := f.read(dir, file)
	return uint64(bytes.Count(b, []byte("\n"))), err
}
