package test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// Helpers of the test image: the loopback registry that serves it, a daemon that
// has pulled it, and crictl's image calls.

// The container tests pull busybox (storagetest's image of the host's static
// busybox) from an in-process registry on 127.0.0.1, through a mirror of
// registry.k8s.io: the daemon is asked for testImage and pulls it from the
// loopback registry.
const (
	testImagePrefix = "registry.k8s.io"
	testImageRepo   = "e2e/busybox"
	testImageTag    = "1.0"
	testImage       = testImagePrefix + "/" + testImageRepo + ":" + testImageTag
)

// imageRegistry is a loopback registry holding the test image.
type imageRegistry struct {
	host   string // 127.0.0.1:port
	digest string // the manifest digest of testImage
}

// startImageRegistry starts a registry for the test (stopped when it ends)
// and pushes the test image to it.
func startImageRegistry(t *testing.T) imageRegistry {
	t.Helper()
	requirePrereqs(t)
	requireContainerTools(t)
	storagetest.RequireBusybox(t)
	host := storagetest.StartRegistry(t)
	digest := storagetest.PushBusybox(t, host, testImageRepo, testImageTag)
	return imageRegistry{host: host, digest: digest}
}

// requireContainerTools stops the test unless runc and conmon are installed:
// it fails under CI=true, where they must be, and skips elsewhere.
func requireContainerTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"runc", "conmon"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Need(t, "container tests need %s in PATH (Debian: apt-get install -y runc conmon)", tool)
		}
	}
}

// mirror is the daemon configuration that pulls registry.k8s.io images from r.
func (r imageRegistry) mirror() []registryMirror {
	return []registryMirror{{prefix: testImagePrefix, location: r.host, insecure: true}}
}

// startContainerDaemon starts a registry and a daemon that pulls from it,
// and pulls the test image. It returns the daemon and how long the pull took.
func startContainerDaemon(t *testing.T, opts daemonOptions) (*daemon, time.Duration) {
	t.Helper()
	reg := startImageRegistry(t)
	opts.registries = append(opts.registries, reg.mirror()...)
	d := startDaemon(t, opts)
	return d, d.pull(t, testImage)
}

// pull runs crictl pull and returns how long it took.
func (d *daemon) pull(t *testing.T, ref string) time.Duration {
	t.Helper()
	start := time.Now()
	out := d.mustCrictl(t, "pull", ref)
	took := time.Since(start)
	if !strings.Contains(out, "Image is up to date") {
		t.Fatalf("crictl pull %s printed %q", ref, out)
	}
	t.Logf("pull of %s took %v", ref, took.Round(time.Millisecond))
	return took
}

// criImage is the part of crictl's image JSON the tests read.
type criImage struct {
	ID          string   `json:"id"`
	RepoTags    []string `json:"repoTags"`
	RepoDigests []string `json:"repoDigests"`
	Size        string   `json:"size"`
}

// images returns crictl images -o json.
func (d *daemon) images(t *testing.T) []criImage {
	t.Helper()
	out := d.mustCrictl(t, "images", "-o", "json")
	var resp struct {
		Images []criImage `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("crictl images -o json: %v\n%s", err, out)
	}
	return resp.Images
}
