package oci

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestUserDatabaseNotRegular is issue 40's: an image whose /etc/passwd or /etc/group is
// a named pipe hung CreateContainer for good (and its pod's Stop and Remove behind it),
// and one whose file is a device node made the daemon open the host's device. Each such
// file must be refused promptly, naming it and its type; a regular file is read.
func TestUserDatabaseNotRegular(t *testing.T) {
	// The files of the escaping link's target, outside the root filesystem: a user and
	// group that must not be found.
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "etc/passwd"), "alice:x:4242:4242::/outside:/bin/sh\n")
	writeFile(t, filepath.Join(outside, "etc/group"), "alice:x:4242:\n")

	for _, file := range []string{"etc/passwd", "etc/group"} {
		for _, tc := range []struct {
			kind    string
			root    bool // mknod needs root
			make    func(path string) error
			wantErr string // "" for the user resolved from the root filesystem's own files
		}{
			{kind: "regular file", make: func(string) error { return nil }},
			{kind: "fifo", make: func(p string) error { return unix.Mkfifo(p, 0o644) },
				wantErr: "/" + file + " is a named pipe (FIFO), not a regular file"},
			{kind: "char device", root: true, make: func(p string) error { return unix.Mknod(p, unix.S_IFCHR|0o644, int(unix.Mkdev(1, 5))) },
				wantErr: "/" + file + " is a character device, not a regular file"},
			{kind: "directory", make: func(p string) error { return os.Mkdir(p, 0o755) },
				wantErr: "/" + file + " is a directory, not a regular file"},
			{kind: "link to a fifo in the root", make: func(p string) error {
				if err := unix.Mkfifo(filepath.Join(filepath.Dir(p), "fifo"), 0o644); err != nil {
					return err
				}
				return os.Symlink("fifo", p)
			}, wantErr: "/" + file + " is a named pipe (FIFO), not a regular file"},
			{kind: "link escaping the root", make: func(p string) error { return os.Symlink(filepath.Join(outside, file), p) },
				wantErr: "is not in the image's"},
		} {
			t.Run(file+"/"+tc.kind, func(t *testing.T) {
				if tc.root {
					testenv.RequireRoot(t, "a device node as /etc/passwd")
				}
				root := specRootfs(t)
				path := filepath.Join(root, file)
				if tc.kind != "regular file" {
					if err := os.Remove(path); err != nil {
						t.Fatal(err)
					}
				}
				if err := tc.make(path); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { releaseFIFO(path) })

				var user specs.User
				err := testenv.Within(10*time.Second, func() error {
					var err error
					user, _, err = resolveUser(root, &runtimeapi.LinuxContainerSecurityContext{}, "alice:alice")
					return err
				})
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("resolveUser: %v", err)
					}
					if user.UID != 1000 || user.GID != 1001 {
						t.Fatalf("user = %+v, want uid 1000 and gid 1001 from the root filesystem's files", user)
					}
					return
				}
				if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("resolveUser: err = %v, want ErrInvalidSpec saying %q", err, tc.wantErr)
				}
			})
		}
	}
}

// releaseFIFO opens path for writing, without blocking, and closes it: a reader blocked
// opening the named pipe there (the daemon's, before issue 40's fix) returns.
func releaseFIFO(path string) {
	if fd, err := unix.Open(path, unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
	}
}
