package journal

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// allocated returns how many bytes of disk the file at path has.
func allocated(t testing.TB, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// highWater returns the end of the file's last page in use.
func highWater(t testing.TB, j *Journal) int64 {
	t.Helper()
	var hw int64
	if err := j.db.View(func(tx *bolt.Tx) error { hw = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	return hw
}

// openOn opens a journal at path (on a file system of the test's), checked at cleanup.
func openOn(t testing.TB, path string, opts Options) *Journal {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	j, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		j.Close()
		checkFile(t, path)
	})
	return j
}

// marker returns a marker value of n bytes.
func marker(n int) *string {
	v := strings.Repeat("m", n)
	return &v
}

// TestSpaceReserveIsAllocated: with a space reserve, the file has at least its high-water
// mark plus the reserve allocated after every commit, also once the file has grown far
// past the first reserve (the top-ups), and after it is reopened; without one, only about
// what it uses.
func TestSpaceReserveIsAllocated(t *testing.T) {
	testenv.RequireRoot(t, "the space reserve's test measures it on a tmpfs of its own")
	const reserve = 1 << 20
	for _, tc := range []struct {
		name    string
		reserve int64
	}{
		{"no reserve", 0},
		{"1 MiB reserve", reserve},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(testenv.SmallFS(t, "", 16<<20), "journal.db")
			j := openOn(t, path, Options{SpaceReserve: tc.reserve})
			requireReserve := func(when string) {
				t.Helper()
				hw, got := highWater(t, j), allocated(t, path)
				switch {
				case tc.reserve > 0 && got < hw+tc.reserve:
					t.Fatalf("%s: %d bytes allocated, want at least the high-water mark %d plus the reserve %d", when, got, hw, tc.reserve)
				case tc.reserve == 0 && got >= hw+reserve:
					t.Fatalf("%s without a reserve: %d bytes allocated for a high-water mark of %d", when, got, hw)
				}
			}
			requireReserve("after Open")
			rec := createdRecord(t, j)
			start := highWater(t, j)
			// Each marker rewrites the record, larger: the file grows by about 3 MiB.
			for i := range 12 {
				if err := j.SetMarker(rec.ID, "m", marker((i+1)*64<<10)); err != nil {
					t.Fatal(err)
				}
				requireReserve("after a commit")
			}
			if grown := highWater(t, j) - start; grown < 2*reserve {
				t.Fatalf("the file grew by %d bytes, want more than twice the reserve (the test's premise)", grown)
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j = openOn(t, path, Options{SpaceReserve: tc.reserve})
			requireReserve("after a reopen")
		})
	}
}

// TestLowSpaceRefusesOnlyCreations: on a full disk (a small tmpfs), a journal with a
// space reserve is low on space: Begin refuses a new creation with ErrLowSpace and
// records nothing, while a change that grows the file by less than the reserve commits
// into it, and so does a removal; a change bigger than the reserve fails the journal
// (fail-stop). Without a reserve, the change that fits in one fails too. Once space is
// freed, creations are taken again.
func TestLowSpaceRefusesOnlyCreations(t *testing.T) {
	testenv.RequireRoot(t, "the low-space test fills a tmpfs of its own")
	const reserve = 1 << 20
	for _, tc := range []struct {
		name    string
		reserve int64
		grow    int // bytes the change on the full disk adds to a record
		commits bool
	}{
		{"change within the reserve commits", reserve, 256 << 10, true},
		{"change beyond the reserve fails stop", reserve, 3 * reserve / 2, false},
		{"without a reserve the small change fails stop", 0, 256 << 10, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := testenv.SmallFS(t, "", 4<<20)
			path := filepath.Join(dir, "journal.db")
			var u undoLog
			j := openOn(t, path, Options{SpaceReserve: tc.reserve, Registry: u.registry(kindA)})
			kept := createdRecord(t, j)
			if err := j.LowSpace(); err != nil {
				t.Fatalf("LowSpace before the disk is full: %v", err)
			}
			filler := testenv.FillFS(t, dir, "filler")

			err := j.LowSpace()
			_, berr := j.Begin(BeginRequest{Kind: KindSandbox, Name: "new", Fingerprint: "fp-new"})
			if tc.reserve > 0 {
				if !errors.Is(err, ErrLowSpace) || !strings.Contains(err.Error(), path) {
					t.Errorf("LowSpace on a full disk: %v, want ErrLowSpace naming %s", err, path)
				}
				if !errors.Is(berr, ErrLowSpace) {
					t.Errorf("Begin on a full disk: %v, want ErrLowSpace", berr)
				}
				if _, gerr := j.getByName(KindSandbox, "new"); !errors.Is(gerr, ErrNotFound) {
					t.Errorf("the refused creation holds its name (%v)", gerr)
				}
			} else if err != nil || berr != nil {
				t.Errorf("without a reserve: LowSpace %v, Begin %v; want neither to refuse", err, berr)
			}

			err = j.SetMarker(kept.ID, "big", marker(tc.grow))
			if !tc.commits {
				if !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("a change of %d bytes on the full disk: %v, want ErrFailed wrapping ENOSPC", tc.grow, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("a change of %d bytes into the reserve: %v", tc.grow, err)
			}
			if err := j.Remove(ctx, kept.ID); err != nil {
				t.Fatalf("removal on the full disk: %v", err)
			}
			if err := j.Err(); err != nil {
				t.Fatalf("the journal failed: %v", err)
			}

			if err := os.Remove(filler); err != nil {
				t.Fatal(err)
			}
			if err := j.LowSpace(); err != nil {
				t.Errorf("LowSpace once space is freed: %v", err)
			}
			rec := begin(t, j, "after", time.Time{})
			step(t, j, rec.ID, kindA, "1")
		})
	}
}

// TestSpaceReserveTopUp: a reserve that cannot be topped up after a commit grew the file
// makes the journal low on space (logged once), refusing creations with an error that
// says by how much the reserve is short; it is topped up, and creations are taken, as
// soon as the disk allows again. A file system that cannot preallocate turns the reserve
// off (logged) instead: nothing is refused.
func TestSpaceReserveTopUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error // what fallocate answers once the test starts failing it
		low  bool
	}{
		{"disk full", unix.ENOSPC, true},
		{"no preallocation", unix.EOPNOTSUPP, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var failWith error
			calls := 0
			fallocate := func(fd int, off, n int64) error {
				mu.Lock()
				defer mu.Unlock()
				calls++
				if failWith != nil {
					return failWith
				}
				return preallocate(fd, off, n)
			}
			setFail := func(err error) {
				mu.Lock()
				defer mu.Unlock()
				failWith = err
			}
			if !tc.low {
				setFail(tc.err) // from Open on
			}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			path := filepath.Join(t.TempDir(), "journal.db")
			j := openOn(t, path, Options{SpaceReserve: 256 << 10, fallocate: fallocate, Logger: log})
			kept := createdRecord(t, j)
			if err := j.LowSpace(); err != nil {
				t.Fatalf("LowSpace before fallocate fails: %v", err)
			}
			setFail(tc.err)
			// Grows the file by more than the reserve: a top-up is due, and fails.
			if err := j.SetMarker(kept.ID, "big", marker(512<<10)); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				err := j.LowSpace()
				_, berr := j.Begin(BeginRequest{Kind: KindSandbox, Name: "new", Fingerprint: "fp-new"})
				if !tc.low {
					if err != nil || berr != nil {
						t.Fatalf("without preallocation: LowSpace %v, Begin %v; want nothing refused", err, berr)
					}
					if !strings.Contains(logs.String(), "journal space reserve off") {
						t.Errorf("the reserve turned off without a word; log:\n%s", &logs)
					}
					return
				}
				if !errors.Is(err, ErrLowSpace) || !strings.Contains(err.Error(), "short by") || !strings.Contains(err.Error(), path) {
					t.Errorf("LowSpace after a failed top-up: %v, want ErrLowSpace naming %s and the shortfall", err, path)
				}
				if !errors.Is(berr, ErrLowSpace) {
					t.Errorf("Begin after a failed top-up: %v, want ErrLowSpace", berr)
				}
				// A request for a held name is answered from its holder all the same.
				if _, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: kept.Name, Fingerprint: kept.Fingerprint}); !errors.Is(err, ErrNameHeld) {
					t.Errorf("Begin of the held name %q while low on space: %v, want ErrNameHeld", kept.Name, err)
				}
			}
			if n := strings.Count(logs.String(), "journal low on disk space"); n != 1 {
				t.Errorf("the low space was logged %d times, want once; log:\n%s", n, &logs)
			}

			setFail(nil)
			if err := j.LowSpace(); err != nil {
				t.Fatalf("LowSpace once fallocate works again: %v", err)
			}
			if hw, got := highWater(t, j), allocated(t, path); got < hw+256<<10 {
				t.Errorf("after the top-up %d bytes are allocated, want the high-water mark %d plus the reserve", got, hw)
			}
			begin(t, j, "new", time.Time{})
			if !strings.Contains(logs.String(), "journal has disk space again") {
				t.Errorf("the end of the low space is not logged; log:\n%s", &logs)
			}
			// A commit that does not grow the file needs no top-up.
			mu.Lock()
			before := calls
			mu.Unlock()
			if err := j.SetMarker(kept.ID, "big", nil); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			after := calls
			mu.Unlock()
			if after != before {
				t.Errorf("a commit that shrank the record called fallocate %d times", after-before)
			}
		})
	}
}
