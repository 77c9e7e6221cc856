package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	digest "github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/types"
)

// ErrPullNoProgress is returned by PullImage when the pull waited on the registry and
// received nothing for Options.PullProgressTimeout (gRPC DeadlineExceeded).
var ErrPullNoProgress = errors.New("no progress")

// progressWatch cancels a pull that waits on the registry and receives no bytes for its
// timeout. It follows containers/image's progress events (copy.Options.Progress): a blob
// is waited on from its first event until all its bytes have been read (its last Read
// event reaches its size) or it is done; before the first blob, the pull waits on the
// registry for the manifest. What happens once a blob has arrived (the layer's
// unpacking, which containers/image does before it reports the blob done) is not
// waiting, however long it takes. As containerd's image_pull_progress_timeout, which
// counts the bytes of the registry's HTTP responses while any is open.
//
// Its goroutine is owned by the pull: it ends when the pull closes the events channel
// (after copy.Image returned), and stop waits for that.
type progressWatch struct {
	events chan types.ProgressProperties
	done   chan struct{}
}

// progressInterval is copy.Options.ProgressInterval while a watch runs: containers/image
// sends a Read event for a blob only when this much time has passed since its last one,
// and the watch must see the last Read of each blob to know it arrived.
const progressInterval = time.Nanosecond

// blobTransfer is a blob being read from the registry.
type blobTransfer struct {
	size    int64  // from the manifest; -1 when unknown
	read    uint64 // bytes read so far
	streams int    // copies of it under way (an image may list a blob twice)
}

func (b *blobTransfer) arrived() bool { return b.size > 0 && b.read >= uint64(b.size) }

// watchProgress starts a watch of a pull that calls cancel with an error wrapping
// ErrPullNoProgress when the pull has waited on the registry and received nothing for
// timeout. The pull sends containers/image's events to w.events and calls w.stop when
// copy.Image has returned.
func watchProgress(timeout time.Duration, cancel context.CancelCauseFunc) *progressWatch {
	w := &progressWatch{
		// Buffered, so that a burst of small reads does not hand over to this goroutine
		// at each one.
		events: make(chan types.ProgressProperties, 64),
		done:   make(chan struct{}),
	}
	tick := min(max(timeout/10, 10*time.Millisecond), time.Second)
	go func() {
		defer close(w.done)
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		blobs := map[digest.Digest]*blobTransfer{}
		started := false    // a blob has been seen: the manifest has arrived
		last := time.Now()  // of the last event, or of the end of the last wait
		var received uint64 // bytes of all blobs, for the message
		fired := false
		for {
			select {
			case p, ok := <-w.events:
				if !ok {
					return
				}
				if fired {
					continue // draining until copy.Image returns
				}
				last = time.Now()
				d := p.Artifact.Digest
				switch p.Event {
				case types.ProgressEventNewArtifact:
					started = true
					b := blobs[d]
					if b == nil {
						b = &blobTransfer{size: p.Artifact.Size}
						blobs[d] = b
					}
					b.streams++
				case types.ProgressEventRead:
					received += p.OffsetUpdate
					if b := blobs[d]; b != nil {
						b.read = max(b.read, p.Offset)
					}
				case types.ProgressEventDone:
					received += p.OffsetUpdate
					if b := blobs[d]; b != nil {
						if b.streams--; b.streams <= 0 {
							delete(blobs, d)
						}
					}
				case types.ProgressEventSkipped:
					started = true
				}
			case now := <-ticker.C:
				if fired {
					continue
				}
				var waitingOn *blobTransfer
				var waitingDigest digest.Digest
				for d, b := range blobs {
					if !b.arrived() {
						waitingOn, waitingDigest = b, d
						break
					}
				}
				if started && waitingOn == nil {
					last = now // not waiting on the registry: the clock starts again at the next wait
					continue
				}
				if now.Sub(last) < timeout {
					continue
				}
				what := "the image's manifest"
				if waitingOn != nil {
					what = fmt.Sprintf("blob %s (%s of %s read)", waitingDigest, mib(int64(waitingOn.read)), sizeOrUnknown(waitingOn.size))
				}
				cancel(fmt.Errorf("%w: no bytes from the registry for %v (image_pull_progress_timeout) while waiting for %s; %s received in all",
					ErrPullNoProgress, timeout, what, mib(int64(received))))
				fired = true
			}
		}
	}()
	return w
}

// stop ends the watch once the pull has returned: no event is sent after it.
func (w *progressWatch) stop() {
	close(w.events)
	<-w.done
}

// mib formats n bytes in MiB with one decimal.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func sizeOrUnknown(n int64) string {
	if n < 0 {
		return "an unknown size"
	}
	return mib(n)
}
