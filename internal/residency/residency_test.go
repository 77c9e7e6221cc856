package residency

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
)

// mapping is one line of /proc/self/maps, with the kB of it resident (smaps Rss).
type mapping struct {
	Segment
	Perms, Path string
	Flags       []string // smaps VmFlags
	RssKB       int
}

func selfMappings(t *testing.T) []mapping {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []mapping
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		switch {
		case len(fs) >= 5 && strings.Contains(fs[0], "-") && !strings.HasSuffix(fs[0], ":"):
			lo, hi, _ := strings.Cut(fs[0], "-")
			start, _ := strconv.ParseUint(lo, 16, 64)
			end, _ := strconv.ParseUint(hi, 16, 64)
			m := mapping{Segment: Segment{uintptr(start), uintptr(end)}, Perms: fs[1]}
			if len(fs) >= 6 {
				m.Path = fs[5]
			}
			out = append(out, m)
		case fs[0] == "Rss:" && len(out) > 0:
			out[len(out)-1].RssKB, _ = strconv.Atoi(fs[1])
		case fs[0] == "VmFlags:" && len(out) > 0:
			out[len(out)-1].Flags = fs[1:]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// executableMappings are the mappings of the running executable's read-only segments.
func executableMappings(t *testing.T) []mapping {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	segs, err := ReadOnlySegments()
	if err != nil {
		t.Fatal(err)
	}
	var out []mapping
	for _, m := range selfMappings(t) {
		for _, s := range segs {
			if m.Path == exe && m.Start < s.End && s.Start < m.End {
				out = append(out, m)
			}
		}
	}
	return out
}

// TestReadOnlySegments: the segments are the executable's own mappings, none writable,
// one of them executable and holding this test's code.
func TestReadOnlySegments(t *testing.T) {
	segs, err := ReadOnlySegments()
	if err != nil {
		t.Fatal(err)
	}
	code := reflect.ValueOf(TestReadOnlySegments).Pointer()
	maps := executableMappings(t)
	if len(maps) == 0 {
		t.Fatalf("segments %x: none is a mapping of the executable", segs)
	}
	holdsCode := false
	for _, m := range maps {
		if strings.Contains(m.Perms, "w") {
			t.Errorf("mapping %x (%s) is writable", m.Segment, m.Perms)
		}
		if strings.Contains(m.Perms, "x") && m.Start <= code && code < m.End {
			holdsCode = true
		}
	}
	if !holdsCode {
		t.Errorf("no executable segment of %x holds the test's code at %#x", segs, code)
	}
}

// TestRelease: the executable's pages leave the process's RSS, and the program, its code
// and its read-only data, works on as before.
func TestRelease(t *testing.T) {
	rss := func() (kb int) {
		for _, m := range executableMappings(t) {
			kb += m.RssKB
		}
		return kb
	}
	before := rss()
	if err := Release(); err != nil {
		t.Fatal(err)
	}
	after := rss()
	if after >= before {
		t.Errorf("the executable's RSS went from %d to %d kB: want less", before, after)
	}
	// Code and read-only data fault back in: formatting reads fmt's tables and unicode's.
	if got := fmt.Sprintf("%q %v", "résidence", strings.ToUpper("é")); got != `"résidence" É` {
		t.Errorf("after Release, formatting gave %s", got)
	}
	t.Logf("the executable's RSS: %d kB before Release, %d kB after", before, after)
}

// TestConstructorAdvisesRandom: the constructor, which runs in every process started
// from a binary that links this package, advised MADV_RANDOM on the read-only data.
func TestConstructorAdvisesRandom(t *testing.T) {
	for _, m := range executableMappings(t) {
		random := false
		for _, f := range m.Flags {
			random = random || f == "rr"
		}
		if exec := strings.Contains(m.Perms, "x"); !exec && !random {
			t.Errorf("read-only data %x (%s): VmFlags %v, want rr (MADV_RANDOM)", m.Segment, m.Perms, m.Flags)
		}
	}
}

// largeFoliosEnv names the test binary's mode (TestMain) that reports the page-cache
// folios behind its executable's read-only segments, for TestServeReadsSmallFolios.
const largeFoliosEnv = "CRIJOURNAL_RESIDENCY_REPORT_FOLIOS"

func TestMain(m *testing.M) {
	if os.Getenv(largeFoliosEnv) != "" {
		n, total, err := largeFolioPages()
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Printf("%d %d\n", n, total)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// largeFolioPages counts the resident pages of the executable's read-only segments that
// belong to a large folio (KPF_COMPOUND_HEAD or KPF_COMPOUND_TAIL in /proc/kpageflags),
// and the resident pages. Reading page frame numbers needs CAP_SYS_ADMIN.
func largeFolioPages() (large, resident int, err error) {
	segs, err := ReadOnlySegments()
	if err != nil {
		return 0, 0, err
	}
	pagemap, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return 0, 0, err
	}
	defer pagemap.Close()
	flags, err := os.Open("/proc/kpageflags")
	if err != nil {
		return 0, 0, err
	}
	defer flags.Close()
	page := uintptr(os.Getpagesize())
	entry := make([]byte, 8)
	for _, s := range segs {
		for a := s.Start; a < s.End; a += page {
			if _, err := pagemap.ReadAt(entry, int64(a/page*8)); err != nil {
				return 0, 0, err
			}
			e := binary.LittleEndian.Uint64(entry)
			if e>>63 == 0 { // not present
				continue
			}
			resident++
			pfn := e & (1<<55 - 1)
			if _, err := flags.ReadAt(entry, int64(pfn*8)); err != nil {
				return 0, 0, err
			}
			const compoundHead, compoundTail = 15, 16
			if f := binary.LittleEndian.Uint64(entry); f&(1<<compoundHead|1<<compoundTail) != 0 {
				large++
			}
		}
	}
	return large, resident, nil
}

// TestServeReadsSmallFolios: a process started as "serve" drops the page cache of its
// executable that a read(2) of the whole file filled (in large folios, where the kernel
// and the file system make them), so that what it maps comes back in small folios.
func TestServeReadsSmallFolios(t *testing.T) {
	testenv.RequireRoot(t, "page frame numbers in /proc/self/pagemap and /proc/kpageflags")
	// A copy of the test binary: the page cache of the running one is mapped by this
	// process, and pages mapped cannot be dropped.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), "residency.test")
	testenv.CopyExecutable(t, self, exe)
	fill := func() {
		f, err := os.Open(exe)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := io.Copy(io.Discard, f); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (large, resident int) {
		t.Helper()
		fill()
		cmd := exec.Command(exe, args...)
		cmd.Env = append(os.Environ(), largeFoliosEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v: %s", exe, args, err, out)
		}
		if _, err := fmt.Sscan(string(out), &large, &resident); err != nil {
			t.Fatalf("%s %q printed %q: %v", exe, args, out, err)
		}
		return large, resident
	}
	// Without "serve", the large folios the read made stay (where the kernel made any).
	control, controlResident := run("-test.run=^$")
	large, resident := run("serve")
	t.Logf("resident pages of the executable in large folios: %d of %d as serve, %d of %d otherwise",
		large, resident, control, controlResident)
	if resident == 0 {
		t.Fatal("as serve: no page of the executable is resident: the count is wrong")
	}
	// The pages mapped before the constructor ran (the dynamic loader's, the entry's) stay
	// as they were.
	if large > resident/8 {
		t.Errorf("as serve: %d of %d resident pages of the executable are in large folios, want at most an eighth", large, resident)
	}
	if control > 0 && large > control/4 {
		t.Errorf("as serve: %d pages in large folios, against %d without the drop: want at most a quarter", large, control)
	}
}
