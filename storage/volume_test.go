package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

func TestImageVolume(t *testing.T) {
	onEachDriver(t, func(t *testing.T, _ string, s *testStore) { testImageVolume(t, s) })
}

func testImageVolume(t *testing.T, s *testStore) {
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	ctr := newID(t)
	id := ImageVolumeID(ctr, 0)

	root, err := s.MountImageVolume(ctx, id, img.ID, map[string]string{"io.crijournal.container": ctr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc", "passwd")); err != nil {
		t.Errorf("the image's /etc/passwd is not in the volume: %v", err)
	}
	if s.Driver() == DriverOverlay {
		// The layer is mounted read-only: nothing can be written through it.
		err := os.WriteFile(filepath.Join(root, "written"), nil, 0o644)
		if !errors.Is(err, unix.EROFS) {
			t.Errorf("write into the image volume: %v, want EROFS", err)
		}
	}
	// A retry (the step run again after a crash) finds the same volume.
	again, err := s.MountImageVolume(ctx, id, img.ID, nil)
	if err != nil || again != root {
		t.Errorf("MountImageVolume again = %q, %v; want %q", again, err, root)
	}
	// Another container's volume of the same image is its own.
	other := ImageVolumeID(newID(t), 0)
	otherRoot, err := s.MountImageVolume(ctx, other, img.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The image is in use while a volume of it exists.
	if err := s.RemoveImage(ctx, img.ID); !errors.Is(err, ErrImageInUse) {
		t.Errorf("RemoveImage of an image with volumes: %v, want ErrImageInUse", err)
	}
	if err := s.DeleteContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteContainer(ctx, id); err != nil {
		t.Errorf("second DeleteContainer: %v, want success (gone)", err)
	}
	if s.Driver() == DriverOverlay && testenv.IsMountPoint(t, root) {
		t.Errorf("%s still mounted after DeleteContainer", root)
	}
	if _, err := os.Stat(filepath.Join(otherRoot, "etc", "passwd")); err != nil {
		t.Errorf("deleting one volume took the other's files: %v", err)
	}
	if err := s.DeleteContainer(ctx, other); err != nil {
		t.Fatal(err)
	}
	if ids, _ := s.Containers(ctx); len(ids) != 0 {
		t.Errorf("storage containers left: %v", ids)
	}
}

func TestMountImageVolumeInvalid(t *testing.T) {
	s := openTestStore(t, DriverVFS)
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	for _, tc := range []struct {
		name, id, image string
		notFound        bool
	}{
		{name: "not a volume ID", id: newID(t), image: img.ID},
		{name: "bad index", id: newID(t) + imageVolumeInfix + "01", image: img.ID},
		{name: "unknown image", id: ImageVolumeID(newID(t), 0), image: newID(t), notFound: true},
		{name: "image ID prefix", id: ImageVolumeID(newID(t), 0), image: img.ID[:12], notFound: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.MountImageVolume(ctx, tc.id, tc.image, nil)
			if err == nil {
				t.Fatal("MountImageVolume succeeded")
			}
			if got := errors.Is(err, ErrImageNotFound); got != tc.notFound {
				t.Errorf("MountImageVolume: %v; ErrImageNotFound %v, want %v", err, got, tc.notFound)
			}
		})
	}
	if ids, _ := s.Containers(ctx); len(ids) != 0 {
		t.Errorf("storage containers left: %v", ids)
	}
}

// TestUndoDeletesImageVolume runs the undo of StepImageVolume after each point a crash
// can leave the step at.
func TestUndoDeletesImageVolume(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	img, _ := pullTestImage(t, s)

	j := openUndoJournal(t, func() (*Store, error) { return s.Store, nil })

	for _, tc := range []struct {
		name string
		act  bool // whether the step acted (else only its intent was recorded)
		done bool
	}{
		{"mounted and done", true, true},
		{"mounted, not marked done", true, false},
		{"intent only", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctr := newID(t)
			rec, err := j.Begin(journal.BeginRequest{ID: ctr, Kind: journal.KindContainer, Name: "undo-" + tc.name})
			if err != nil {
				t.Fatal(err)
			}
			step := ImageVolumeStep(s.Store, ImageVolumeRequest{ContainerID: ctr, ImageID: img.ID, Destination: "/vol"})
			seq, err := j.Intents(rec.ID, journal.Intended{Stage: step.Stage, Kind: step.Kind, Args: step.Args})
			if err != nil {
				t.Fatal(err)
			}
			var root string
			if tc.act {
				if root, err = step.Run(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if tc.done {
				if err := j.Done(rec.ID, seq); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Rollback(ctx, rec.ID); err != nil {
				t.Fatalf("Rollback: %v", err)
			}
			if ids, _ := s.Containers(ctx); slices.Contains(ids, ImageVolumeID(ctr, 0)) {
				t.Errorf("image volume %s left after Rollback", ImageVolumeID(ctr, 0))
			}
			if root != "" && testenv.IsMountPoint(t, root) {
				t.Errorf("%s still mounted after Rollback", root)
			}
		})
	}
}

// TestImageVolumeStepArgsAreStable pins what ImageVolumeStep records: it is stored on disk.
func TestImageVolumeStepArgsAreStable(t *testing.T) {
	ctr := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	a := ImageVolumeStep(nil, ImageVolumeRequest{ContainerID: ctr, Index: 2, ImageID: "img", Destination: "/v"})
	if a.Kind != "storage-image-volume" || len(a.Args) != 1 || a.Args["id"] != ctr+"-imagevolume-2" {
		t.Errorf("step %s %v, want storage-image-volume {id: %s-imagevolume-2}", a.Kind, a.Args, ctr)
	}
}
