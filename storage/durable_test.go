package storage

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	drivers "go.podman.io/storage/drivers"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// TestPullIsDurableBeforeItsAnswer: a pull flushes the graph root's file system once the
// image is recorded and before it answers, and fails when the flush fails; on overlay,
// containers/storage flushes each layer before recording it complete (sync=filesystem).
func TestPullIsDurableBeforeItsAnswer(t *testing.T) {
	onEachDriver(t, func(t *testing.T, driver string, s *testStore) {
		if s.Driver() == DriverOverlay {
			d, err := s.st.GraphDriver()
			if err != nil {
				t.Fatal(err)
			}
			if got := d.SyncMode(); got != drivers.SyncModeFilesystem {
				t.Errorf("overlay's sync mode = %v, want filesystem", got)
			}
		}
		storagetest.PushBusybox(t, s.host, "test/busybox", "1.0")
		var synced []string
		var recordedAtSync bool
		fail := errors.New("flush failed")
		var syncErr error
		defer func(orig func(string) error) { syncfs = orig }(syncfs)
		syncfs = func(dir string) error {
			synced = append(synced, dir)
			// The image is recorded by then: images.json names the test image.
			b, _ := os.ReadFile(filepath.Join(s.opts.Root, s.Driver()+"-images", "images.json"))
			recordedAtSync = strings.Contains(string(b), "test/busybox:1.0")
			return syncErr
		}
		ctx := context.Background()
		if _, err := s.PullImage(ctx, testImage, nil); err != nil {
			t.Fatal(err)
		}
		if len(synced) != 1 || synced[0] != s.opts.Root {
			t.Errorf("flushed %v, want the graph root %s once", synced, s.opts.Root)
		}
		if !recordedAtSync {
			t.Error("the flush ran before the image was recorded")
		}

		if err := s.RemoveImage(ctx, testImage); err != nil {
			t.Fatal(err)
		}
		syncErr = fail
		if _, err := s.PullImage(ctx, testImage, nil); !errors.Is(err, fail) {
			t.Errorf("PullImage with a failing flush = %v, want %v", err, fail)
		}
	})
}

// BenchmarkPullDurable is BenchmarkPull's pull (busybox and a 16 MiB incompressible
// layer, then its removal) on each driver: "answer" with the flush of the graph root
// before the answer (what a pull does), "none" without it, and on overlay "layers+answer"
// with containers/storage's flush of each layer too (what a pull does there).
// flush-ms/op is the time spent in the flush before the answer.
func BenchmarkPullDurable(b *testing.B) {
	storagetest.RequireRoot(b)
	storagetest.RequireBusybox(b)
	host := storagetest.StartRegistry(b)
	ref := pushBig(b, host)
	for _, driver := range []string{DriverOverlay, DriverVFS} {
		for _, mode := range []string{"none", "answer", "layers+answer"} {
			if driver == DriverVFS && mode == "layers+answer" {
				continue // vfs refuses its sync option (see durable.go)
			}
			b.Run(driver+"/"+mode, func(b *testing.B) {
				defer func(layers bool, fs func(string) error) { syncLayers, syncfs = layers, fs }(syncLayers, syncfs)
				syncLayers = mode == "layers+answer"
				var flushed time.Duration // in the flushes before the answers
				if mode == "none" {
					syncfs = func(string) error { return nil }
				} else {
					orig := syncfs
					syncfs = func(dir string) error {
						start := time.Now()
						err := orig(dir)
						flushed += time.Since(start)
						return err
					}
				}
				dir := b.TempDir()
				s, err := Open(context.Background(), Options{Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run"),
					Driver: driver, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				defer s.Close()
				ctx := context.Background()
				for b.Loop() {
					if _, err := s.PullImage(ctx, ref, nil); err != nil {
						b.Fatal(err)
					}
					if err := s.RemoveImage(ctx, ref); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(flushed.Milliseconds())/float64(b.N), "flush-ms/op")
			})
		}
	}
}
