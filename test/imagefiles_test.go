package test

import (
	"archive/tar"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// TestImagePasswdFIFO is issue 40's: an image whose /etc/passwd is a named pipe hung
// CreateContainer for good (the daemon opened the pipe to read it), holding its pod's
// gate, so that the pod's stop and removal timed out until the daemon restarted. The
// creation is refused at once, InvalidArgument naming the file and its type, and the
// pod stops and goes.
func TestImagePasswdFIFO(t *testing.T) {
	t.Parallel()
	reg := startImageRegistry(t)
	const repo, tag = "e2e/fifo-passwd", "1.0"
	storagetest.PushBusyboxWith(t, reg.host, repo, tag, tar.Header{Typeflag: tar.TypeFifo, Name: "etc/passwd", Mode: 0o644})
	d := startDaemon(t, daemonOptions{registries: reg.mirror()})
	image := testImagePrefix + "/" + repo + ":" + tag
	d.pull(t, image)

	pod := d.containerPod(t, "fifo", false)
	podID := d.mustRunp(t, pod)
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "c", 0, sleeper, withImage(image)), pod)
	requireCode(t, "crictl create from an image whose /etc/passwd is a named pipe", err, stderr, "InvalidArgument")
	if want := "/etc/passwd is a named pipe (FIFO), not a regular file"; !strings.Contains(stderr, want) {
		t.Errorf("crictl create: %s\nwant it to say %q", stderr, want)
	}
	d.removePod(t, podID)
	d.assertNoLeaks(t)
	d.stopClean(t)
}
