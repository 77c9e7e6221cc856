package test

import (
	"context"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/failpoint"
)

// Containers on a storage driver whose root filesystems are mounts (overlay).

// TestContainerOverlay runs containers on the overlay driver, whose root
// filesystems are mounts: they are mounted while their containers exist,
// stay mounted across a daemon crash, and are unmounted when the container
// is removed or its creation rolled back.
func TestContainerOverlay(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{storageDriver: "overlay"})
	pod := d.containerPod(t, "overlay", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "layered", 0, sleeper), pod)
	d.waitLog(t, id, "hello-from-container", 10*time.Second)
	if got := d.execSync(t, id, "sh", "-c", "echo written > /tmp/f; cat /tmp/f"); got != "written" {
		t.Fatalf("writing in the container's root filesystem: %q", got)
	}
	d.assertNoLeaks(t, podID, id)
	var rootfs []string
	for _, m := range mountsBelow(d.storageRoot()) {
		if strings.Contains(m, "/merged") {
			rootfs = append(rootfs, m)
		}
	}
	if len(rootfs) != 1 {
		t.Fatalf("overlay mounts of root filesystems under %s: %v, want the container's", d.storageRoot(), rootfs)
	}
	left := strings.Join(d.leaks(t, podID), "\n")
	if !strings.Contains(left, "mount "+rootfs[0]) {
		t.Errorf("the leak check does not report the root filesystem mount %s; it reports:\n%s", rootfs[0], left)
	}

	d.kill(t)
	d.start(t, daemonBinary(t))
	d.waitReady(t)
	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	if got := d.execSync(t, id, "cat", "/tmp/f"); got != "written" {
		t.Fatalf("after a daemon crash the container's file reads %q", got)
	}
	// A creation rolled back after its root filesystem was mounted: a bad
	// mount is refused once storage is made.
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "bad", 0, sleeper, withMount("rel", t.TempDir())), pod)
	requireCode(t, "create with a relative mount path", err, stderr, "InvalidArgument")
	d.assertNoLeaks(t, podID, id)

	d.removeCtr(t, id)
	d.assertNoLeaks(t, podID)

	// Crashes with a root filesystem mounted: during a creation (rolled
	// back at the next start) and during a removal (finished then).
	crash := func(point string, provoke func()) {
		t.Helper()
		d.restartArmed(t, point)
		provoke()
		d.requireKilledAt(t, point, 10*time.Second)
		d.restartUnarmed(t)
		d.requirePs(t, "after a crash at "+point)
		d.assertNoLeaks(t, podID)
	}
	crash("container-create/oci-container/after-intent", func() {
		if _, _, err := d.create(t, nil, podID, containerConfig(t, "crash-create", 0, sleeper), pod); err == nil {
			t.Fatal("create succeeded: the daemon did not crash")
		}
	})
	victim := d.run(t, podID, containerConfig(t, "crash-remove", 0, sleeper), pod)
	// The root filesystem's deletion comes after the removal's answer (the journal's
	// Maintain runs it), so the crash there may come before the answer is sent or
	// after: either way the container is gone for the client, and the restart
	// finishes the deletion.
	crash("journal/remove/storage-container/before-undo", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := d.cri(t).RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: victim})
		t.Logf("RemoveContainer before the crash: %v", err)
	})

	d.removePod(t, podID)
	d.mustCrictl(t, "rmi", testImage)
	d.stopClean(t)
}

// TestRemoveImageAfterAFailedRootfsDeletion: a removed container whose root filesystem
// could not be deleted yet (its deferred undo fails, by a failure point) still uses its
// image. crictl rmi is refused with FailedPrecondition and a message that says the
// containers it names may be removed ones (crictl lists them no more), that the daemon
// retries their deletion, and to retry later; once the deletion can run, the image goes.
func TestRemoveImageAfterAFailedRootfsDeletion(t *testing.T) {
	t.Parallel()
	// The removal's deletion fails, and so does every retry of it: a removal whose undo
	// failed is retried as a rollback (its record is undoing), within undo_retry_min
	// (200ms here) of the failure, which a loaded node's crictl rmi may come after.
	d, _ := startContainerDaemon(t, daemonOptions{env: []string{failpoint.EnvVar +
		"=journal/remove/storage-container/before-undo=error,journal/rollback/storage-container/before-undo=error"}})
	pod := d.containerPod(t, "rmi", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "c", 0, sleeper), pod)
	d.mustCrictl(t, "stop", "-t", "0", id)
	d.mustCrictl(t, "rm", id)
	_, stderr, err := d.crictl(t, "rmi", testImage)
	requireCode(t, "crictl rmi while the removed container's root filesystem cannot be deleted", err, stderr, "FailedPrecondition")
	for _, want := range []string{id, "removed containers", "retry the image's removal later"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("crictl rmi's error does not say %q:\n%s", want, stderr)
		}
	}
	d.removePod(t, podID)
	d.restartUnarmed(t)
	d.mustCrictl(t, "rmi", testImage)
	d.stopClean(t)
}
