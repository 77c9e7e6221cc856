package storage

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// TestEachImageLooksUpAsItGoes: EachImage looks each image up just before it hands it
// over, after the previous one was handed over, not all first (issue 51's item 7:
// StreamImages sends as it reads). Here the first image handed over removes the others:
// they are never handed over, as a list built first would have them.
func TestEachImageLooksUpAsItGoes(t *testing.T) {
	s := openTestStore(t, DriverVFS)
	ctx := context.Background()
	var ids []string
	for _, sig := range []string{"SIGUSR1", "SIGUSR2", "SIGHUP"} {
		storagetest.PushBusyboxStopSignal(t, s.host, "test/each", sig, sig)
		img, err := s.PullImage(ctx, "registry.k8s.io/test/each:"+sig, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, img.ID)
	}
	if all, err := s.ListImages(ctx); err != nil || len(all) != len(ids) {
		t.Fatalf("ListImages = %d images, %v; want %d", len(all), err, len(ids))
	}

	var got []string
	err := s.EachImage(ctx, func(img Image) error {
		if len(got) == 0 {
			for _, id := range ids {
				if id != img.ID {
					if err := s.RemoveImage(ctx, id); err != nil {
						return err
					}
				}
			}
		}
		got = append(got, img.ID)
		return nil
	})
	if err != nil || len(got) != 1 || !slices.Contains(ids, got[0]) {
		t.Fatalf("EachImage handed over %v, %v; want only the first image, the others removed by then", got, err)
	}

	// An error from fn stops it, and is EachImage's.
	stop := errors.New("stop")
	n := 0
	if err := s.EachImage(ctx, func(Image) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("EachImage with a failing fn = %v after %d images; want the error after 1", err, n)
	}
}
