package residency

import (
	"debug/elf"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"

	"golang.org/x/sys/unix"
)

// Segment is an address range of the running program's executable.
type Segment struct{ Start, End uintptr }

// ReadOnlySegments returns the loaded, read-only segments of the running executable
// (its code, read-only data and function tables), page-aligned, less the part the
// dynamic linker wrote before making it read-only (PT_GNU_RELRO), whose pages are no
// longer the file's.
func ReadOnlySegments() ([]Segment, error) {
	segs, err := readOnlySegments()
	return slices.Clone(segs), err
}

// readOnlySegments reads the program headers once: the executable does not change under
// a running process.
var readOnlySegments = sync.OnceValues(func() ([]Segment, error) {
	f, err := elf.Open("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("read the program headers of the executable: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		// A position-independent executable loads at an address its headers do not say.
		return nil, fmt.Errorf("the executable is %v, not a fixed-address executable", f.Type)
	}
	page := uint64(os.Getpagesize())
	var relro Segment
	for _, p := range f.Progs {
		if p.Type == elf.PT_GNU_RELRO {
			relro = Segment{uintptr(p.Vaddr &^ (page - 1)), uintptr((p.Vaddr + p.Memsz + page - 1) &^ (page - 1))}
		}
	}
	var segs []Segment
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_W != 0 {
			continue
		}
		s := Segment{uintptr(p.Vaddr &^ (page - 1)), uintptr((p.Vaddr + p.Filesz) &^ (page - 1))}
		if relro.End > s.Start && relro.Start < s.End {
			// RELRO sits at the start of the writable segment; should a linker put it in a
			// read-only one, keep the segment's pages before it.
			s.End = min(s.End, relro.Start)
		}
		if s.End > s.Start {
			segs = append(segs, s)
		}
	}
	return segs, nil
})

// Release unmaps the pages of the executable's read-only segments from the process:
// they are the file's, unchanged, and a later use maps them again from the page cache.
func Release() error {
	segs, err := ReadOnlySegments()
	if err != nil {
		return err
	}
	for _, s := range segs {
		// madvise(2) by address: the range is the executable's, not a Go slice's.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, s.Start, s.End-s.Start, unix.MADV_DONTNEED); errno != 0 {
			return fmt.Errorf("release the executable's pages at %#x: %w", s.Start, errno)
		}
	}
	return nil
}

// Trim releases the executable's pages and returns the heap's free memory to the system.
// It collects twice: a collection only moves what sync.Pools hold to their victim caches
// (an image pull's compression buffers, in pgzip's and containers/storage's pools), and
// the next one frees it.
func Trim() error {
	runtime.GC()
	debug.FreeOSMemory()
	return Release()
}
