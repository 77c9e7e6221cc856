package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cstorage "go.podman.io/storage"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// TestOpenRepairsWhatACutDamaged damages a graph root as a power cut can (a layer flagged
// incomplete, an image whose layer directory is gone, a layer no record uses) and checks
// that the next Open removes the damaged images and layers and logs them, keeps the sound
// image, and leaves the storage containers (the journal's) alone, a damaged one included,
// for their records' undo.
func TestOpenRepairsWhatACutDamaged(t *testing.T) {
	for _, split := range []bool{false, true} {
		t.Run(map[bool]string{false: "graph root", true: "image store"}[split], func(t *testing.T) { testRepair(t, split) })
	}
}

// testRepair is TestOpenRepairsWhatACutDamaged with the images in the graph root, or in
// an image store of their own (split).
func testRepair(t *testing.T, split bool) {
	edit := func(o *Options) {
		if split {
			o.ImageStore = filepath.Join(filepath.Dir(o.Root), "images")
		}
	}
	onEachDriverWith(t, edit, func(t *testing.T, driver string, s *testStore) {
		setBootID(t, "boot-1")
		s.reopen(t, nil) // checked in boot-1
		ctx := context.Background()
		sound, sid := createTestContainer(t, s)
		damagedID := newID(t)
		if _, err := s.CreateContainer(ctx, damagedID, "k8s_d_p_ns_uid_0", sound.ID, nil); err != nil {
			t.Fatal(err)
		}
		gone := pullVariant(t, s, "gone")
		torn := pullVariant(t, s, "torn")
		stray, err := s.st.CreateLayer("", "", nil, "", false, nil) // a container's layer whose record a cut lost
		if err != nil {
			t.Fatal(err)
		}
		goneTop, tornTop := topLayer(t, s, gone.ID), topLayer(t, s, torn.ID)
		damagedLayer := containerLayer(t, s, damagedID)

		// A restart in the same boot does not check again: the stray layer stays.
		s.reopen(t, nil)
		if _, err := s.st.Layer(stray.ID); err != nil {
			t.Fatalf("a restart in the same boot checked the store again: %v", err)
		}

		var logs bytes.Buffer
		s.opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		s.reopen(t, func() { // the cut, and the reboot
			removeLayerDir(t, s, goneTop)
			removeLayerDir(t, s, damagedLayer)
			flagIncomplete(t, s, tornTop)
			setBootID(t, "boot-2")
		})
		t.Log(logs.String())

		for _, img := range []Image{gone, torn} {
			if _, err := s.ImageStatus(ctx, img.ID); !errors.Is(err, ErrImageNotFound) {
				t.Errorf("ImageStatus of the damaged image %s = %v, want ErrImageNotFound (so that the kubelet pulls it again)", img.RepoTags, err)
			}
		}
		for _, id := range []string{goneTop, tornTop, stray.ID} {
			if _, err := s.st.Layer(id); err == nil {
				t.Errorf("layer %s is still there", id)
			}
		}
		if _, err := s.ImageStatus(ctx, sound.ID); err != nil {
			t.Errorf("the sound image: %v", err)
		}
		ids, err := s.Containers(ctx)
		if err != nil || len(ids) != 2 {
			t.Errorf("Containers = %v, %v; want both: they are the journal's", ids, err)
		}
		if _, err := s.Mount(ctx, sid); err != nil {
			t.Errorf("Mount of the sound container: %v", err)
		} else if err := s.Unmount(ctx, sid); err != nil {
			t.Error(err)
		}
		for _, want := range []string{"removed an image", gone.ID, torn.ID, "removed a layer", stray.ID, "left for the journal", damagedID} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("the log does not say %q", want)
			}
		}
		// The damaged container's undo removes it.
		if err := s.DeleteContainer(ctx, damagedID); err != nil {
			t.Errorf("DeleteContainer of the damaged container: %v", err)
		}
		if done, err := s.repair(); err != nil || len(done.Images)+len(done.Layers)+len(done.Kept) != 0 {
			t.Errorf("a second check found %+v, %v; want nothing", done, err)
		}
	})
}

// setBootID makes the store's boot ID (see checkedThisBoot) id until the test ends.
func setBootID(t *testing.T, id string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "boot_id")
	if err := os.WriteFile(file, []byte(id+"\n"), 0o444); err != nil {
		t.Fatal(err)
	}
	orig := bootIDFile
	bootIDFile = file
	t.Cleanup(func() { bootIDFile = orig })
}

// pullVariant pushes and pulls the busybox image with one more layer (a directory named
// name), as registry.k8s.io/test/<name>:1.0.
func pullVariant(t testing.TB, s *testStore, name string) Image {
	t.Helper()
	storagetest.PushBusyboxWith(t, s.host, "test/"+name, "1.0", tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755})
	img, err := s.PullImage(context.Background(), "registry.k8s.io/test/"+name+":1.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func topLayer(t *testing.T, s *testStore, imageID string) string {
	t.Helper()
	img, err := s.st.Image(imageID)
	if err != nil {
		t.Fatal(err)
	}
	return img.TopLayer
}

func containerLayer(t *testing.T, s *testStore, id string) string {
	t.Helper()
	c, err := s.st.Container(id)
	if err != nil {
		t.Fatal(err)
	}
	return c.LayerID
}

// roots are the store's graph root and, when it has one, its image store.
func (s *testStore) roots() []string {
	if s.opts.ImageStore != "" {
		return []string{s.opts.Root, s.opts.ImageStore}
	}
	return []string{s.opts.Root}
}

// removeLayerDir removes a layer's directory as the driver keeps it (in the graph root or
// the image store), as a cut that lost its files leaves it.
func removeLayerDir(t *testing.T, s *testStore, id string) {
	t.Helper()
	for _, root := range s.roots() {
		dir := filepath.Join(root, layersDir(s.Driver()), id)
		if _, err := os.Stat(dir); err == nil {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no directory of layer %s under %v", id, s.roots())
}

// flagIncomplete flags a layer incomplete in the layer records (of the graph root or the
// image store), as a cut during its unpacking leaves it.
func flagIncomplete(t *testing.T, s *testStore, id string) {
	t.Helper()
	for _, root := range s.roots() {
		path := filepath.Join(root, s.Driver()+"-layers", "layers.json")
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		var layers []map[string]any
		if err := json.Unmarshal(b, &layers); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range layers {
			if l["id"] == id {
				l["flags"] = map[string]any{"incomplete": true}
				found = true
			}
		}
		if !found {
			continue
		}
		if b, err = json.Marshal(layers); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("layer %s is in no layers.json under %v", id, s.roots())
}

// BenchmarkRepair measures Open's check of a sound graph root holding four images (the
// busybox image and three with one more layer each) and two containers: what every start
// pays for it ("quick"); "digests" is containers/storage's CheckMost, which reads every
// layer back and digests it, for comparison.
func BenchmarkRepair(b *testing.B) {
	storagetest.RequireRoot(b)
	storagetest.RequireBusybox(b)
	host := storagetest.StartRegistry(b)
	for _, driver := range []string{"", DriverVFS} {
		dir := b.TempDir()
		s, err := Open(context.Background(), Options{Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run"),
			Driver: driver, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for i, n := range []string{"busybox", "a", "b", "c"} {
			ref := host + "/bench/" + n + ":1.0"
			if n == "busybox" {
				storagetest.PushBusybox(b, host, "bench/"+n, "1.0")
			} else {
				storagetest.PushBusyboxWith(b, host, "bench/"+n, "1.0", tar.Header{Typeflag: tar.TypeDir, Name: n + "/", Mode: 0o755})
			}
			img, err := s.PullImage(ctx, ref, nil)
			if err != nil {
				b.Fatal(err)
			}
			if i < 2 {
				if _, err := s.CreateContainer(ctx, fmt.Sprintf("%064x", i+1), "k8s_c_p_ns_uid_"+n, img.ID, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.Run(s.Driver()+"/quick", func(b *testing.B) {
			for b.Loop() {
				done, err := s.repair()
				if err != nil || len(done.Images)+len(done.Layers)+len(done.Kept) != 0 {
					b.Fatalf("repair of a sound store = %+v, %v", done, err)
				}
			}
		})
		b.Run(s.Driver()+"/digests", func(b *testing.B) {
			for b.Loop() {
				if _, err := s.st.Check(cstorage.CheckMost()); err != nil {
					b.Fatal(err)
				}
			}
		})
		for i := range 2 {
			_ = s.DeleteContainer(ctx, fmt.Sprintf("%064x", i+1))
		}
		s.Close()
	}
}

// TestCheckedThisBoot: the check's mark says "checked" only for the boot it names; a
// missing, torn or other boot's mark, or no boot ID at all, makes Open check. noteChecked
// leaves the whole mark and nothing else.
func TestCheckedThisBoot(t *testing.T) {
	tests := []struct {
		name string
		mark *string // nil: no mark
		boot bool    // the kernel gives a boot ID
		want bool    // checkedThisBoot says checked
	}{
		{name: "no mark", boot: true},
		{name: "this boot", mark: ptr("boot-1\n"), boot: true, want: true},
		{name: "an earlier boot", mark: ptr("boot-0\n"), boot: true},
		{name: "torn mark", mark: ptr("boo"), boot: true},
		{name: "empty mark", mark: ptr(""), boot: true},
		{name: "no boot ID", mark: ptr("\n")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.boot {
				setBootID(t, "boot-1")
			} else {
				orig := bootIDFile
				bootIDFile = filepath.Join(t.TempDir(), "none")
				t.Cleanup(func() { bootIDFile = orig })
			}
			root := t.TempDir()
			if tt.mark != nil {
				if err := os.WriteFile(filepath.Join(root, checkedBootFile), []byte(*tt.mark), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			boot, checked := checkedThisBoot(root)
			if checked != tt.want {
				t.Errorf("checkedThisBoot = %q, %v; want checked %v", boot, checked, tt.want)
			}
			if err := noteChecked(root, boot); err != nil {
				t.Fatal(err)
			}
			if _, checked := checkedThisBoot(root); checked != tt.boot {
				t.Errorf("after noteChecked, checkedThisBoot = %v, want %v", checked, tt.boot)
			}
			entries, _ := os.ReadDir(root)
			if tt.boot && (len(entries) != 1 || entries[0].Name() != checkedBootFile) {
				t.Errorf("the graph root holds %v, want only %s", entries, checkedBootFile)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
