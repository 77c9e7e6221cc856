package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strings"
	"sync"

	"go.podman.io/image/v5/docker/reference"
)

// errStoreClosed is returned by a PullImage that arrives while the store closes.
var errStoreClosed = errors.New("image storage is closing")

// pullFlights shares one download among the PullImage calls that ask for the same image
// with the same credentials at the same time (a kubelet's pods that start together, or a
// retry while the first pull still runs): the first call starts the pull, each later one
// waits for its result. The pull runs detached from every caller's context, so that one
// caller that gives up does not cut the download short for the others; when every caller
// has gone, it is cancelled. As CRI-O's pullOperationsInProgress (which keeps the first
// caller's context) and containerd's per-reference lock (which pulls again once the first
// is done, from its content store).
//
// A flight is a goroutine of the group's: its stop is its context's cancel, called when
// its last caller goes and by close, which waits for every flight to end.
type pullFlights struct {
	mu      sync.Mutex
	flights map[string]*pullFlight // by pullKey, while the pull runs and has callers
	closed  bool
	wg      sync.WaitGroup // the flights' goroutines
}

// pullFlight is one shared pull. Its result fields are written before done is closed.
type pullFlight struct {
	callers int // waiting callers, under pullFlights.mu
	cancel  context.CancelFunc
	done    chan struct{}
	img     Image
	err     error
}

// do returns the result of pull for key: of a pull under way for key, or of one it starts
// now. pull gets a context that no caller's cancellation reaches; it is cancelled when
// every caller of do for this flight has returned early because its own context ended.
// shared says whether the call joined a pull another call had started.
func (g *pullFlights) do(ctx context.Context, key string, pull func(context.Context) (Image, error)) (img Image, shared bool, err error) {
	if err := ctx.Err(); err != nil {
		return Image{}, false, err
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return Image{}, false, errStoreClosed
	}
	f, shared := g.flights[key]
	if !shared {
		// Values (a trace, a logger) carry over; cancellation and the deadline do not.
		fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		f = &pullFlight{cancel: cancel, done: make(chan struct{})}
		if g.flights == nil {
			g.flights = map[string]*pullFlight{}
		}
		g.flights[key] = f
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer cancel()
			img, err := pull(fctx)
			g.mu.Lock()
			if g.flights[key] == f {
				delete(g.flights, key)
			}
			f.img, f.err = img, err
			g.mu.Unlock()
			close(f.done)
		}()
	}
	f.callers++
	g.mu.Unlock()

	select {
	case <-f.done:
		return f.img.clone(), shared, f.err
	case <-ctx.Done():
		g.mu.Lock()
		f.callers--
		if f.callers == 0 {
			// Nobody waits for it any more: stop the download, and let the next call
			// start afresh rather than join a cancelled pull.
			f.cancel()
			if g.flights[key] == f {
				delete(g.flights, key)
			}
		}
		g.mu.Unlock()
		return Image{}, shared, ctx.Err()
	}
}

// close cancels every pull under way and waits for them to end; later calls of do fail.
func (g *pullFlights) close() {
	g.mu.Lock()
	g.closed = true
	for _, f := range g.flights {
		f.cancel()
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// pullKey is what makes two pulls the same: the qualified names a reference stands for, in
// the order they are tried, and the credentials, hashed (a pull with other credentials may
// be let in where this one is not, or the other way round).
func pullKey(names []reference.Named, auth *Auth) string {
	var b strings.Builder
	for _, n := range names {
		b.WriteString(n.String())
		b.WriteByte('\n')
	}
	if auth != nil {
		h := sha256.New()
		for _, field := range []string{auth.Username, auth.Password, auth.Auth, auth.IdentityToken, auth.RegistryToken} {
			h.Write([]byte(field))
			h.Write([]byte{0})
		}
		b.WriteString("auth:")
		b.WriteString(hex.EncodeToString(h.Sum(nil)))
	}
	return b.String()
}

// clone returns a copy of img that shares no slice or map with it: each caller of a shared
// pull gets its own.
func (img Image) clone() Image {
	img.RepoTags = slices.Clone(img.RepoTags)
	img.RepoDigests = slices.Clone(img.RepoDigests)
	img.Config = img.Config.clone()
	return img
}
