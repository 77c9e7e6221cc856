package storage

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.podman.io/image/v5/types"
)

// TestPullFlights: calls for one key share one pull; a caller whose context ends returns
// at once while the pull goes on for the others; the pull is cancelled when its last
// caller has gone; close cancels what runs and refuses more.
func TestPullFlights(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cancelFirst bool // the first caller gives up before the pull ends
		cancelAll   bool // every caller gives up
		wantPulls   int32
		wantErr     error // of the second caller
		wantPullCtx error // what the pull's context says when it returns
	}{
		{name: "two callers, one pull", wantPulls: 1},
		{name: "the first gives up, the second still gets it", cancelFirst: true, wantPulls: 1},
		{name: "both give up: the pull is cancelled", cancelAll: true, wantPulls: 1, wantErr: context.Canceled, wantPullCtx: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g pullFlights
			var pulls atomic.Int32
			release := make(chan struct{})
			pullCtxErr := make(chan error, 1)
			pull := func(ctx context.Context) (Image, error) {
				pulls.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
				}
				pullCtxErr <- ctx.Err()
				return Image{ID: "img", RepoTags: []string{"a"}}, ctx.Err()
			}
			ctx1, cancel1 := context.WithCancel(context.Background())
			ctx2, cancel2 := context.WithCancel(context.Background())
			defer cancel1()
			defer cancel2()
			type result struct {
				img    Image
				shared bool
				err    error
			}
			r1, r2 := make(chan result, 1), make(chan result, 1)
			go func() { img, shared, err := g.do(ctx1, "k", pull); r1 <- result{img, shared, err} }()
			waitFor(t, func() bool { return pulls.Load() == 1 })
			go func() { img, shared, err := g.do(ctx2, "k", pull); r2 <- result{img, shared, err} }()
			waitFor(t, func() bool {
				g.mu.Lock()
				defer g.mu.Unlock()
				return g.flights["k"] != nil && g.flights["k"].callers == 2
			})

			if tc.cancelFirst || tc.cancelAll {
				cancel1()
				if r := <-r1; !errors.Is(r.err, context.Canceled) {
					t.Errorf("first caller after its cancel: %v, want context.Canceled", r.err)
				}
			}
			if tc.cancelAll {
				cancel2()
			} else {
				select {
				case err := <-pullCtxErr:
					t.Fatalf("the pull ended (%v) while a caller still waited", err)
				case <-time.After(50 * time.Millisecond):
				}
				close(release)
			}
			r := <-r2
			if !errors.Is(r.err, tc.wantErr) || (tc.wantErr == nil && r.err != nil) {
				t.Errorf("second caller: %v, want %v", r.err, tc.wantErr)
			}
			if !r.shared {
				t.Errorf("second caller: not shared")
			}
			if tc.wantErr == nil && r.img.ID != "img" {
				t.Errorf("second caller got %+v", r.img)
			}
			if err := <-pullCtxErr; !errors.Is(err, tc.wantPullCtx) || (tc.wantPullCtx == nil && err != nil) {
				t.Errorf("the pull's context at its end: %v, want %v", err, tc.wantPullCtx)
			}
			if !tc.cancelFirst && !tc.cancelAll {
				if r := <-r1; r.err != nil || r.shared {
					t.Errorf("first caller: %+v, want the image, not shared", r)
				}
			}
			if got := pulls.Load(); got != tc.wantPulls {
				t.Errorf("%d pulls, want %d", got, tc.wantPulls)
			}
			g.close()
			if _, _, err := g.do(context.Background(), "k", pull); !errors.Is(err, errStoreClosed) {
				t.Errorf("do after close = %v, want errStoreClosed", err)
			}
		})
	}
}

// TestProgressWatch: the watch cancels a pull stalled before its manifest or in a blob,
// and not one whose blobs have all arrived (being unpacked) or that keeps receiving.
func TestProgressWatch(t *testing.T) {
	const timeout = 100 * time.Millisecond
	blob := types.BlobInfo{Digest: "sha256:aaaa", Size: 1000}
	for _, tc := range []struct {
		name   string
		events []types.ProgressProperties
		feed   bool // keep sending reads every 20ms for 4 timeouts
		cancel bool
	}{
		{name: "no manifest", cancel: true},
		{name: "stalled in a blob", cancel: true, events: []types.ProgressProperties{
			{Event: types.ProgressEventNewArtifact, Artifact: blob},
			{Event: types.ProgressEventRead, Artifact: blob, Offset: 500, OffsetUpdate: 500},
		}},
		{name: "blob arrived, being unpacked", events: []types.ProgressProperties{
			{Event: types.ProgressEventNewArtifact, Artifact: blob},
			{Event: types.ProgressEventRead, Artifact: blob, Offset: 1000, OffsetUpdate: 1000},
		}},
		{name: "blob done", events: []types.ProgressProperties{
			{Event: types.ProgressEventNewArtifact, Artifact: blob},
			{Event: types.ProgressEventDone, Artifact: blob, Offset: 1000},
		}},
		{name: "slow but moving", feed: true, events: []types.ProgressProperties{
			{Event: types.ProgressEventNewArtifact, Artifact: blob},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			w := watchProgress(timeout, cancel)
			for _, e := range tc.events {
				w.events <- e
			}
			end := time.Now().Add(4 * timeout)
			for off := uint64(1); time.Now().Before(end); off++ {
				if tc.feed {
					w.events <- types.ProgressProperties{Event: types.ProgressEventRead, Artifact: blob, Offset: off, OffsetUpdate: 1}
				}
				time.Sleep(20 * time.Millisecond)
			}
			w.stop()
			cause := context.Cause(ctx)
			if got := errors.Is(cause, ErrPullNoProgress); got != tc.cancel {
				t.Errorf("cancelled with %v; want a cancel: %v", cause, tc.cancel)
			}
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
	}
}
