package netns

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/layout"
)

// TestHostLocalDirs: the host-local directory of each configured network that uses
// host-local, its dataDir or host-local's default, under the network's name.
func TestHostLocalDirs(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"10-a.conflist": `{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge","ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}},{"type":"portmap"}]}`,
		"20-b.conf":     `{"cniVersion":"1.0.0","name":"b","type":"bridge","ipam":{"type":"host-local","dataDir":"/srv/ipam","subnet":"10.2.0.0/16"}}`,
		"30-c.conflist": `{"cniVersion":"1.0.0","name":"c","plugins":[{"type":"bridge","ipam":{"type":"dhcp"}}]}`,
		"40-d.conflist": `{not json`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := HostLocalDirs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/srv/ipam/b", filepath.Join(layout.DefaultHostLocalDataDir, "a")}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("HostLocalDirs = %v, want %v", got, want)
	}
	names, err := NetworkNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{"a", "b", "c"}; !slices.Equal(names, want) {
		t.Errorf("NetworkNames = %v, want %v", names, want)
	}
	if got, err := HostLocalDirs(""); err != nil || got != nil {
		t.Errorf("HostLocalDirs(\"\") = %v, %v", got, err)
	}
}

// TestRemoveTornAllocations: under host-local's lock, the empty address files (what a
// power cut leaves of one) go, and nothing else; it waits for the lock.
func TestRemoveTornAllocations(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"lock":               "",
		"last_reserved_ip.0": "",
		"10.1.0.2":           "0123abcd\neth0",
		"10.1.0.3":           "",
		"fd00__3":            "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// host-local holds its lock: the removal waits for it.
	held, err := os.Open(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		freed []string
		err   error
	}
	done := make(chan answer, 1)
	go func() {
		freed, err := RemoveTornAllocations(dir)
		done <- answer{freed, err}
	}()
	select {
	case <-done:
		t.Fatal("RemoveTornAllocations did not wait for host-local's lock")
	case <-time.After(200 * time.Millisecond):
	}
	held.Close() // releases the lock
	var got answer
	select {
	case got = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("RemoveTornAllocations still waits after the lock was released")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	slices.Sort(got.freed)
	if want := []string{"10.1.0.3", "fd00__3"}; !slices.Equal(got.freed, want) {
		t.Errorf("freed %v, want %v", got.freed, want)
	}
	for _, name := range []string{"lock", "last_reserved_ip.0", "10.1.0.2"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v; want it kept", name, err)
		}
	}
	if freed, err := RemoveTornAllocations(filepath.Join(dir, "none")); err != nil || freed != nil {
		t.Errorf("RemoveTornAllocations of a missing directory = %v, %v", freed, err)
	}
}

// TestRemoveTornResults: the empty results of this node's networks written before the
// boot go; a whole result, one written since the boot, another runtime's network's and
// a directory stay.
func TestRemoveTornResults(t *testing.T) {
	dir := t.TempDir()
	boot := time.Now().Add(-time.Hour)
	before, after := boot.Add(-time.Minute), boot.Add(time.Minute)
	files := []struct {
		name    string
		content string
		mtime   time.Time
		removed bool
	}{
		{"cj-0123-eth0", "", before, true},
		{"cj-4567-eth0", `{"cniVersion":"1.0.0"}`, before, false},
		{"cj-89ab-eth0", "", after, false},
		{"other-cdef-eth0", "", before, false},
		{"cjx-0000-eth0", "", before, false},
		{"cj2-1111-eth0", "", before, true},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, []byte(f.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, f.mtime, f.mtime); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "cj-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	got, err := RemoveTornResults(dir, []string{"cj", "cj2", ""}, boot)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		_, statErr := os.Stat(filepath.Join(dir, f.name))
		if gone := os.IsNotExist(statErr); gone != f.removed {
			t.Errorf("%s: removed %v, want %v", f.name, gone, f.removed)
		}
		if f.removed {
			want = append(want, f.name)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("RemoveTornResults = %v, want %v", got, want)
	}
	if _, err := os.Stat(filepath.Join(dir, "cj-dir")); err != nil {
		t.Errorf("a directory was removed: %v", err)
	}
	if got, err := RemoveTornResults(filepath.Join(dir, "missing"), []string{"cj"}, boot); err != nil || got != nil {
		t.Errorf("RemoveTornResults(missing) = %v, %v", got, err)
	}
}

// TestBootTime: the kernel booted before now, and after the epoch.
func TestBootTime(t *testing.T) {
	bt, err := BootTime()
	if err != nil {
		t.Fatal(err)
	}
	if !bt.Before(time.Now()) || bt.Before(time.Unix(0, 0).Add(time.Hour)) {
		t.Errorf("BootTime = %v", bt)
	}
}
