package test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// blobRegistry is a loopback registry (go-containerregistry's, in memory) behind a
// handler of the test's own, which counts the downloads of each blob and can make one
// blob's download stall part way, or trickle: the registry a pull's failure modes need.
type blobRegistry struct {
	host string // 127.0.0.1:port

	mu        sync.Mutex
	gets      map[string]int       // blob GETs that began, by digest
	behaviour map[string]blobServe // how a blob is served, by digest; default at once
	cut       map[string]int       // downloads whose client went away before the end, by digest
	stop      chan struct{}        // closed when the test ends: stalled downloads return
}

// blobServe says how the registry serves one blob.
type blobServe struct {
	stallAfter int64         // >0: send this many bytes, then nothing until the client goes
	chunk      int64         // >0: send this many bytes at a time...
	every      time.Duration // ...each after this pause
}

var blobPathRE = regexp.MustCompile(`^/v2/.+/blobs/(sha256:[0-9a-f]{64})$`)

// startBlobRegistry starts a blobRegistry for the test (stopped when it ends).
func startBlobRegistry(t *testing.T) *blobRegistry {
	t.Helper()
	r := &blobRegistry{gets: map[string]int{}, behaviour: map[string]blobServe{}, cut: map[string]int{}, stop: make(chan struct{})}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		m := blobPathRE.FindStringSubmatch(req.URL.Path)
		if m == nil || req.Method != http.MethodGet {
			inner.ServeHTTP(w, req)
			return
		}
		d := m[1]
		r.mu.Lock()
		r.gets[d]++
		b, special := r.behaviour[d]
		r.mu.Unlock()
		if !special {
			inner.ServeHTTP(w, req)
			return
		}
		// The whole blob from the inner registry, then sent as b says.
		rec := httptest.NewRecorder()
		inner.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			w.WriteHeader(rec.Code)
			w.Write(rec.Body.Bytes())
			return
		}
		body := rec.Body.Bytes()
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Header().Set("Docker-Content-Digest", d)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(http.StatusOK)
		flush := func() {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		wait := func(d time.Duration) bool {
			timer := time.NewTimer(d)
			defer timer.Stop()
			select {
			case <-timer.C:
				return true
			case <-req.Context().Done():
				return false
			case <-r.stop:
				return false
			}
		}
		sent := int64(0)
		for sent < int64(len(body)) {
			n := int64(len(body)) - sent
			if b.chunk > 0 {
				n = min(n, b.chunk)
			}
			if b.stallAfter > 0 {
				n = min(n, b.stallAfter-sent)
			}
			if _, err := w.Write(body[sent : sent+n]); err != nil {
				r.noteCut(d)
				return
			}
			flush()
			sent += n
			if b.stallAfter > 0 && sent >= b.stallAfter {
				select {
				case <-req.Context().Done():
					r.noteCut(d)
				case <-r.stop:
				}
				return
			}
			if b.every > 0 && sent < int64(len(body)) && !wait(b.every) {
				r.noteCut(d)
				return
			}
		}
	}))
	t.Cleanup(func() {
		close(r.stop)
		srv.Close()
	})
	r.host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

func (r *blobRegistry) noteCut(d string) {
	r.mu.Lock()
	r.cut[d]++
	r.mu.Unlock()
}

// serve sets how blob d is served from now on.
func (r *blobRegistry) serve(d v1.Hash, b blobServe) {
	r.mu.Lock()
	r.behaviour[d.String()] = b
	r.mu.Unlock()
}

// downloads returns how many downloads of blob d began, and how many of them the client
// left before their end.
func (r *blobRegistry) downloads(d v1.Hash) (began, cut int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gets[d.String()], r.cut[d.String()]
}

// mirror is the daemon configuration that pulls registry.k8s.io images from r.
func (r *blobRegistry) mirror() []registryMirror {
	return []registryMirror{{prefix: testImagePrefix, location: r.host, insecure: true}}
}

// push pushes img as repo:tag and returns the name the daemon pulls it by.
func (r *blobRegistry) push(t *testing.T, img v1.Image, repo, tag string) string {
	t.Helper()
	ref, err := name.NewTag(r.host+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return testImagePrefix + "/" + repo + ":" + tag
}

// layerContent is how a generated layer's one file is filled.
type layerContent int

const (
	randomBytes layerContent = iota // incompressible: the blob is as big as the file
	zeroBytes                       // compresses to almost nothing: the blob is small, the file not
)

// dataLayer returns a layer that holds one file, /data/<file>, of size bytes of content,
// generated (from seed, so that every read gives the same) as the layer is read, not
// held in memory.
func dataLayer(t *testing.T, file string, size int64, content layerContent, seed uint64) v1.Layer {
	t.Helper()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			tw := tar.NewWriter(pw)
			err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "data/", Mode: 0o755, ModTime: time.Unix(0, 0)})
			if err == nil {
				err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "data/" + file, Mode: 0o644, Size: size, ModTime: time.Unix(0, 0)})
			}
			if err == nil {
				var src io.Reader = io.LimitReader(zeroReader{}, size)
				if content == randomBytes {
					src = io.LimitReader(rand.NewChaCha8(seedBytes(seed)), size)
				}
				_, err = io.Copy(tw, src)
			}
			if err == nil {
				err = tw.Close()
			}
			pw.CloseWithError(err)
		}()
		return pr, nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatalf("layer %s: %v", file, err)
	}
	return layer
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func seedBytes(seed uint64) (s [32]byte) {
	for i := range 4 {
		for j := range 8 {
			s[i*8+j] = byte(seed >> (8 * j))
		}
		seed = seed*6364136223846793005 + 1442695040888963407
	}
	return s
}

// busyboxWith returns the busybox image with layers on top.
func busyboxWith(t *testing.T, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(storagetest.BusyboxImage(t), layers...)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// blobDigest returns the digest of a layer's blob.
func blobDigest(t *testing.T, l v1.Layer) v1.Hash {
	t.Helper()
	d, err := l.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
