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
