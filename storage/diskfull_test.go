package storage

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestDiskFullNamesWhereThePullWrites: the error of a pull that found the disk full names
// the directory the image went to: the graph root, or the image store when there is one
// (a split image file system, where the graph root's disk is not the one that is full).
func TestDiskFullNamesWhereThePullWrites(t *testing.T) {
	for _, tc := range []struct {
		name       string
		imageStore bool
	}{
		{"graph root", false},
		{"image store", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var imageStore string
			s := openTestStoreWith(t, "vfs", func(o *Options) {
				if tc.imageStore {
					imageStore = filepath.Join(filepath.Dir(o.Root), "images")
					o.ImageStore = imageStore
				}
			})
			err := s.diskFull("registry.k8s.io/x:1", syscall.ENOSPC)
			if !errors.Is(err, ErrDiskFull) {
				t.Fatalf("diskFull: %v, not ErrDiskFull", err)
			}
			want, other := s.opts.Root, imageStore
			if tc.imageStore {
				want, other = imageStore, s.opts.Root
			}
			msg := err.Error()
			if !strings.Contains(msg, "in "+want+" (") {
				t.Errorf("diskFull names %q, want the directory %s: %s", msg, want, msg)
			}
			if other != "" && strings.Contains(msg, other+" (") {
				t.Errorf("diskFull names %s, where the pull wrote nothing: %s", other, msg)
			}
		})
	}
}
