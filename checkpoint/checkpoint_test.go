package checkpoint

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/oci"
)

func TestPlan(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, location string
		ok             bool
	}{
		{"empty", "", false},
		{"relative", "x.tar", false},
		{"root", "/", false},
		{"missing directory", filepath.Join(dir, "missing", "x.tar"), false},
		{"under a file", filepath.Join(file, "x.tar"), false},
		{"a directory", dir, false},
		{"new file", filepath.Join(dir, "x.tar"), true},
		{"existing file", file, true},
		{"unclean", dir + "/./y.tar", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job, err := Plan("/var/lib/cj/checkpoints", tc.location, "abc", "runc")
			if !tc.ok {
				if !errors.Is(err, ErrInvalidLocation) {
					t.Fatalf("Plan(%q) = %+v, %v; want ErrInvalidLocation", tc.location, job, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Plan(%q): %v", tc.location, err)
			}
			if job.Location != filepath.Clean(tc.location) || filepath.Dir(job.Partial) != filepath.Dir(job.Location) ||
				!strings.Contains(filepath.Base(job.Partial), ".crijournal-") || filepath.Dir(job.Work) != "/var/lib/cj/checkpoints" ||
				!strings.HasPrefix(filepath.Base(job.Work), "abc-") {
				t.Errorf("Plan(%q) = %+v: want the partial archive beside the location and the work directory under the root", tc.location, job)
			}
		})
	}
	a, _ := Plan("/w", filepath.Join(dir, "x.tar"), "abc", "runc")
	b, _ := Plan("/w", filepath.Join(dir, "x.tar"), "abc", "runc")
	if a.Work == b.Work || a.Partial == b.Partial {
		t.Errorf("two plans of one export share files: %+v, %+v", a, b)
	}
}

func TestWriteArchive(t *testing.T) {
	work := t.TempDir()
	files := map[string]string{"config.dump": "{}", "checkpoint/pages-1.img": "memory", "checkpoint/inventory.img": "inv"}
	for name, content := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(work, name)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "a.tar")
	if err := writeArchive(context.Background(), work, out); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("archive: %v, %v; want mode 0600", fi, err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = string(b)
	}
	for name, content := range files {
		if got[name] != content {
			t.Errorf("archive entry %s = %q, want %q (entries %v)", name, got[name], content, got)
		}
	}
	if _, ok := got["checkpoint/"]; !ok {
		t.Errorf("archive lacks the directory checkpoint/: %v", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := writeArchive(ctx, work, out+"2"); !errors.Is(err, context.Canceled) {
		t.Errorf("writeArchive with an ended context: %v, want context.Canceled", err)
	}
}

// TestPublish: the archive replaces what is at the location whole, and the partial file
// is gone; when the rename fails, nothing is at the location and the partial file stays
// for the step's undo.
func TestPublish(t *testing.T) {
	tests := []struct {
		name    string
		before  *string // the location's content before; nil: none
		noDir   bool    // the location's directory is gone
		wantErr bool
	}{
		{name: "new location"},
		{name: "replaces a file", before: new("an older archive")},
		{name: "location's directory gone", noDir: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			partial := filepath.Join(dir, ".a.tar.crijournal-0")
			location := filepath.Join(dir, "a.tar")
			if tt.noDir {
				location = filepath.Join(dir, "gone", "a.tar")
			}
			if err := os.WriteFile(partial, []byte("the whole archive"), 0o600); err != nil {
				t.Fatal(err)
			}
			if tt.before != nil {
				if err := os.WriteFile(location, []byte(*tt.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := publish(partial, location)
			if (err != nil) != tt.wantErr {
				t.Fatalf("publish = %v, want error %v", err, tt.wantErr)
			}
			got, rerr := os.ReadFile(location)
			_, perr := os.Stat(partial)
			if tt.wantErr {
				if rerr == nil || perr != nil {
					t.Errorf("after a failed publish: location %q (%v), partial %v; want no location and the partial kept", got, rerr, perr)
				}
				return
			}
			if string(got) != "the whole archive" || !errors.Is(perr, fs.ErrNotExist) {
				t.Errorf("after publish: location %q (%v), partial %v; want the archive and no partial", got, rerr, perr)
			}
		})
	}
}

// TestKillWriters: a process working in a work directory (a CRIU whose daemon died) is
// killed before the directory goes.
func TestKillWriters(t *testing.T) {
	work := t.TempDir()
	cmd := exec.Command("sleep", "300")
	cmd.Dir = work
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// killWriters loops until the process is gone, which needs its reaping.
	if err := killWriters(ctx, work); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("the process in the work directory ended with %v, want SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the work directory still runs")
	}
}

// TestUndo: the undo removes the work directory and the partial archive, never the
// archive, and is idempotent; a container the runtime does not know needs no thaw.
func TestUndo(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (runc)")
	}
	short, err := os.MkdirTemp("", "cju") // t.TempDir's path is too long for conmon's sockets
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	rt, err := oci.New(oci.Config{Handler: "runc", Root: filepath.Join(short, "root"), StateDir: filepath.Join(short, "s")})
	if err != nil {
		t.Skipf("no runtime: %v", err)
	}
	dir := t.TempDir()
	job, err := Plan(t.TempDir(), filepath.Join(dir, "x.tar"), "abc", "runc")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{job.Partial, job.Location, filepath.Join(job.Work, "checkpoint", "pages-1.img")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	runtimes := func(string) (*oci.Runtime, error) { return rt, nil }
	for i := range 2 {
		if err := undo(context.Background(), runtimes, job.Step().Args); err != nil {
			t.Fatalf("undo %d: %v", i+1, err)
		}
		for _, p := range []string{job.Partial, job.Work} {
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("after undo %d, %s: %v, want it gone", i+1, p, err)
			}
		}
		if _, err := os.Stat(job.Location); err != nil {
			t.Errorf("undo %d removed the archive: %v", i+1, err)
		}
	}
	bad := job.Step().Args
	bad[ArgPartial] = job.Location
	if err := undo(context.Background(), runtimes, bad); err == nil {
		t.Error("undo of a step whose partial archive is named as no partial archive is: no error")
	}
}
