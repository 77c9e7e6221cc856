package residency

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"
	"unsafe"

	"github.com/crijournal/crijournal/internal/testenv"
)

// faultAroundEnv names the test binary's mode (TestMain) that prints how many pages of
// its code one read fault makes resident, for TestServeMapsLessAroundAFault.
const faultAroundEnv = "CRIJOURNAL_RESIDENCY_REPORT_FAULT_AROUND"

// faultWindow is the kernel's default fault-around (fault_around_bytes): a fault maps the
// page-cache pages of the 64 KiB-aligned window around the page touched.
const faultWindow = 64 << 10

// codeByte is where touchCode puts what it reads, so that the reads are not left out.
var codeByte byte

// pagesPerFault releases the executable's pages, reads one byte at the start of every
// fault-around window of its code, and returns the mean number of pages each read made
// resident in its window: those resident after the reads less those resident before them
// (which the program's own code, running since the release, faulted in).
func pagesPerFault() (float64, error) {
	segs, err := ReadOnlySegments()
	if err != nil {
		return 0, err
	}
	entry := reflect.ValueOf(pagesPerFault).Pointer()
	var text Segment
	for _, s := range segs {
		if s.Start <= entry && entry < s.End {
			text = s
		}
	}
	var touched []uintptr
	for a := (text.Start + faultWindow - 1) &^ (faultWindow - 1); a+faultWindow <= text.End; a += faultWindow {
		touched = append(touched, a)
	}
	if len(touched) == 0 {
		return 0, fmt.Errorf("code segment %x: smaller than %d bytes", text, faultWindow)
	}
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, err
	}
	defer pagemap.Close()
	page := uintptr(os.Getpagesize())
	entries := make([]byte, faultWindow/page*8)
	resident := func() (n int, err error) {
		for _, a := range touched {
			if _, err := pagemap.ReadAt(entries, int64(a/page*8)); err != nil {
				return 0, err
			}
			for i := 0; i < len(entries); i += 8 {
				if entries[i+7]&0x80 != 0 { // bit 63: present
					n++
				}
			}
		}
		return n, nil
	}
	// Code that runs for the first time since the release between the two counts (a
	// goroutine of the runtime's, say) adds to the count; it never takes away. So the
	// least of a few rounds.
	least := -1
	for range 3 {
		if err := Release(); err != nil {
			return 0, err
		}
		before, err := resident()
		if err != nil {
			return 0, err
		}
		code := unsafe.Pointer(reflect.ValueOf(pagesPerFault).Pointer())
		for _, a := range touched {
			codeByte += *(*byte)(unsafe.Add(code, int(a)-int(entry)))
		}
		after, err := resident()
		if err != nil {
			return 0, err
		}
		if least < 0 || after-before < least {
			least = after - before
		}
	}
	return float64(least) / float64(len(touched)), nil
}

// TestServeMapsLessAroundAFault: a process started as "serve" has its read-only segments
// cut into mappings of splitRun bytes (see constructor.go), so that a fault in its code
// makes at most that much resident, where another process of the same binary gets the
// kernel's whole fault-around window.
func TestServeMapsLessAroundAFault(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy, as TestServeReadsSmallFolios does: the page cache of the running binary is
	// mapped by this process, and "serve" drops and reads back its copy's.
	exe := filepath.Join(t.TempDir(), "residency.test")
	testenv.CopyExecutable(t, self, exe)
	run := func(args ...string) (pages float64) {
		t.Helper()
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(), faultAroundEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v: %s", exe, args, err, out)
		}
		if _, err := fmt.Sscan(string(out), &pages); err != nil {
			t.Fatalf("%s %q printed %q: %v", exe, args, out, err)
		}
		return pages
	}
	control := run("-test.run=^$")
	serve := run("serve")
	t.Logf("pages made resident in the 64 KiB around a byte of code read: %.1f as serve, %.1f otherwise", serve, control)
	if control <= 2 {
		t.Skipf("this kernel maps %.1f pages around a fault of a process that is not serving: nothing to cut down", control)
	}
	// At most a mapping's pages, and a few more that the program's own code, running
	// between the counts, may have faulted in.
	if limit := float64(splitRun)/float64(os.Getpagesize()) + 0.5; serve > limit {
		t.Errorf("as serve, %.1f pages made resident around each byte read, want at most %.1f (mappings of %d KiB)", serve, limit, splitRun>>10)
	}
}
