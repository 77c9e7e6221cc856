package test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/storage"
)

// Mounts beyond a plain bind: recursive read-only mounts, image volumes and
// host paths that do not exist yet; and the image volume's crash triggers.

// withMounts adds mounts (CRI Mount as JSON) to a container configuration.
func withMounts(ms ...map[string]any) ctrOption {
	return func(cfg map[string]any) {
		mounts, _ := cfg["mounts"].([]any)
		for _, m := range ms {
			mounts = append(mounts, m)
		}
		cfg["mounts"] = mounts
	}
}

// runcListsRRO reports whether runc (in PATH, the daemon's) lists the "rro"
// mount option in `runc features`.
func runcListsRRO(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("runc", "features").Output()
	if err != nil {
		t.Fatalf("runc features: %v", err)
	}
	var f struct {
		MountOptions []string `json:"mountOptions"`
	}
	mustDecode(t, "runc features", out, &f)
	return slices.Contains(f.MountOptions, "rro")
}

// handlerRRO returns what Status says of the handler's recursive read-only
// mounts.
func (d *daemon) handlerRRO(t *testing.T, handler string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := d.cri(t).Status(ctx, &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range st.GetRuntimeHandlers() {
		if h.GetName() == handler {
			return h.GetFeatures().GetRecursiveReadOnlyMounts()
		}
	}
	t.Fatalf("Status lists no handler %q: %v", handler, st.GetRuntimeHandlers())
	return false
}

// rroHostPath makes a host directory with a tmpfs mounted at tmpfs/ in it, as
// critest does: a read-only bind keeps the tmpfs writable, a recursive
// read-only one does not.
func rroHostPath(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	sub := filepath.Join(dir, "tmpfs")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("none", sub, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs on %s: %v", sub, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(sub, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", sub, err)
		}
	})
	return dir
}

// TestRecursiveReadOnlyMount runs containers with a read-only and a
// recursive read-only mount of a directory that holds a tmpfs: through the
// first the tmpfs stays writable, through the second it is read-only. Status
// reports the feature, and the combinations the CRI forbids (not read-only,
// propagation other than PRIVATE) are refused with InvalidArgument.
func TestRecursiveReadOnlyMount(t *testing.T) {
	t.Parallel()
	if !runcListsRRO(t) {
		t.Skip("the default runtime (runc in PATH) does not list the rro mount option in `runc features`: recursive read-only mounts cannot be run; TestRecursiveReadOnlyRefused covers the refusal")
	}
	d, _ := startContainerDaemon(t, daemonOptions{})
	if !d.handlerRRO(t, "runc") || !d.handlerRRO(t, "") {
		t.Fatal("Status does not report recursive read-only mounts for runc, whose features list rro")
	}
	pod := d.containerPod(t, "rro", false)
	podID := d.mustRunp(t, pod)
	host := rroHostPath(t)

	plain := d.run(t, podID, containerConfig(t, "ro", 0, sleeper, withMounts(
		map[string]any{"container_path": "/mnt", "host_path": host, "readonly": true})), pod)
	if got := d.execSync(t, plain, "sh", "-c", "touch /mnt/tmpfs/file && echo written"); got != "written" {
		t.Errorf("a read-only (not recursive) mount: writing in its tmpfs printed %q, want it to succeed", got)
	}
	if got := d.execSync(t, plain, "sh", "-c", "touch /mnt/top 2>&1 || true"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("a read-only mount: writing at its top printed %q, want Read-only file system", got)
	}
	rro := d.run(t, podID, containerConfig(t, "rro", 0, sleeper, withMounts(
		map[string]any{"container_path": "/mnt", "host_path": host, "readonly": true, "recursive_read_only": true})), pod)
	if got := d.execSync(t, rro, "sh", "-c", "touch /mnt/tmpfs/foo 2>&1 || true"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("a recursive read-only mount: writing in its tmpfs printed %q, want Read-only file system", got)
	}

	for _, tc := range []struct {
		name  string
		mount map[string]any
		says  string
	}{
		{"not read-only", map[string]any{"readonly": false}, "must set readonly"},
		{"host to container", map[string]any{"propagation": int(runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER)}, "must have propagation PRIVATE"},
		{"bidirectional", map[string]any{"propagation": int(runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL)}, "must have propagation PRIVATE"},
	} {
		m := map[string]any{"container_path": "/mnt", "host_path": host, "readonly": true, "recursive_read_only": true}
		for k, v := range tc.mount {
			m[k] = v
		}
		_, stderr, err := d.create(t, nil, podID, containerConfig(t, "rro-"+strings.ReplaceAll(tc.name, " ", "-"), 0, sleeper, withMounts(m)), pod)
		requireCode(t, "crictl create with a recursive read-only mount, "+tc.name, err, stderr, "InvalidArgument")
		if !strings.Contains(stderr, tc.says) {
			t.Errorf("recursive read-only mount, %s: error %q does not say %q", tc.name, stderr, tc.says)
		}
	}
	d.assertNoLeaks(t, podID, plain, rro)
	d.removeCtr(t, plain)
	d.removeCtr(t, rro)
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestRecursiveReadOnlyRefused runs the daemon on a runc whose `features`
// leave out rro (a wrapper), as an old runc would: Status must not report
// recursive read-only mounts for the handler, and a container that asks for
// one is refused with InvalidArgument, saying why, while a plain read-only
// mount still runs.
func TestRecursiveReadOnlyRefused(t *testing.T) {
	t.Parallel()
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Skip(err)
	}
	wrapper := filepath.Join(t.TempDir(), "runc")
	writeFile(t, wrapper, `#!/bin/bash
# crijournal end-to-end tests: runc without the rro mount option in its features.
for a in "$@"; do
	if [ "$a" = features ]; then
		`+shellQuote(runc)+` "$@" | sed '/"rro",/d'
		exit "${PIPESTATUS[0]}"
	fi
done
exec `+shellQuote(runc)+` "$@"
`, 0o755)
	out, err := exec.Command(wrapper, "features").Output()
	if err != nil {
		t.Fatalf("%s features: %v", wrapper, err)
	}
	var f struct {
		MountOptions []string `json:"mountOptions"`
	}
	mustDecode(t, "the wrapper's features", out, &f)
	if slices.Contains(f.MountOptions, "rro") || !slices.Contains(f.MountOptions, "ro") {
		t.Fatalf("the wrapper's mount options %v: want ro without rro", f.MountOptions)
	}

	d, _ := startContainerDaemon(t, daemonOptions{runtimePath: wrapper})
	if d.handlerRRO(t, "runc") || d.handlerRRO(t, "") {
		t.Error("Status reports recursive read-only mounts for a runtime whose features do not list rro")
	}
	pod := d.containerPod(t, "norro", false)
	podID := d.mustRunp(t, pod)
	host := t.TempDir()
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "rro", 0, sleeper, withMounts(
		map[string]any{"container_path": "/mnt", "host_path": host, "readonly": true, "recursive_read_only": true})), pod)
	requireCode(t, "crictl create with a recursive read-only mount on a runtime without rro", err, stderr, "InvalidArgument")
	if !strings.Contains(stderr, "recursive read-only mounts are not supported by this runtime handler") {
		t.Errorf("the refusal %q does not say the runtime handler lacks recursive read-only mounts", stderr)
	}
	d.assertNoLeaks(t, podID)
	plain := d.run(t, podID, containerConfig(t, "ro", 0, sleeper, withMounts(
		map[string]any{"container_path": "/mnt", "host_path": host, "readonly": true})), pod)
	d.requireCtrState(t, plain, "CONTAINER_RUNNING")
	d.removeCtr(t, plain)
	d.removePod(t, podID)
	d.stopClean(t)
}

// testImageID returns the storage ID of the test image, as PullImage answers
// it (and the kubelet puts in an image volume's image).
func (d *daemon) testImageID(t *testing.T) string {
	t.Helper()
	for _, img := range d.images(t) {
		if slices.Contains(img.RepoTags, testImage) {
			return img.ID
		}
	}
	t.Fatalf("crictl images lists no %s", testImage)
	return ""
}

// imageVolume is an image volume mount of the test image at dst.
func imageVolume(dst, image, subPath string) map[string]any {
	m := map[string]any{"container_path": dst, "readonly": true, "image": map[string]any{"image": image, "user_specified_image": testImage}}
	if subPath != "" {
		m["image_sub_path"] = subPath
	}
	return m
}

// TestImageVolume mounts the test image into a container twice, whole and
// its etc/ only (image_sub_path), on the overlay driver: the files are there,
// read-only but executable; ContainerStatus reports the image ID as each
// mount's image_ref; the volumes outlive a daemon crash and go with the
// container. An escaping sub path and a read-write image volume are refused
// with InvalidArgument, a missing image with NotFound, a missing sub path with
// InvalidArgument once the image is mounted (and the mount is undone).
func TestImageVolume(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{storageDriver: "overlay"})
	imageID := d.testImageID(t)
	pod := d.containerPod(t, "imagevolume", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "volumes", 0, sleeper, withMounts(
		imageVolume("/mnt/image", imageID, ""), imageVolume("/mnt/etc", testImage, "etc"))), pod)

	if got := d.execSync(t, id, "ls", "/mnt/image/bin/sh"); got != "/mnt/image/bin/sh" {
		t.Errorf("ls of the image volume's /bin/sh printed %q", got)
	}
	if got := d.execSync(t, id, "sh", "-c", "touch /mnt/image/written 2>&1 || true"); !strings.Contains(got, "Read-only file system") {
		t.Errorf("writing into the image volume printed %q, want Read-only file system", got)
	}
	if got := d.execSync(t, id, "/mnt/image/bin/busybox", "echo", "runs"); got != "runs" {
		t.Errorf("running the image volume's busybox printed %q (mounted noexec?)", got)
	}
	if got := d.execSync(t, id, "sh", "-c", "head -c 5 /mnt/etc/passwd; ls /mnt/etc/etc 2>/dev/null || echo no-etc-in-etc"); got != "root:no-etc-in-etc" {
		t.Errorf("the sub path volume shows %q, want etc/passwd at its top and no etc/ in it", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := d.cri(t).ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]string{}
	for _, m := range st.GetStatus().GetMounts() {
		refs[m.GetContainerPath()] = m.GetImage().GetImageRef()
	}
	if refs["/mnt/image"] != imageID || refs["/mnt/etc"] != imageID {
		t.Errorf("ContainerStatus mounts' image_ref %v, want %s for both", refs, imageID)
	}
	// Each volume is a storage container of its own whose ID starts with the
	// container's, mounted (overlay) while the container exists.
	volMounts := func() []string {
		var out []string
		for _, m := range mountsBelow(d.storageRoot()) {
			if strings.HasSuffix(m, "/merged") {
				out = append(out, m)
			}
		}
		return out
	}
	if n := len(volMounts()); n != 3 {
		t.Errorf("overlay mounts under the storage root: %v, want 3 (the root filesystem and two volumes)", volMounts())
	}
	sids, err := storageContainers(d.storageRoot(), d.storageRunRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1} {
		if _, ok := sids[storage.ImageVolumeID(id, i)]; !ok {
			t.Errorf("no storage container %s for image volume %d", storage.ImageVolumeID(id, i), i)
		}
	}
	d.assertNoLeaks(t, podID, id)

	// The volumes outlive a daemon crash.
	d.kill(t)
	d.start(t, daemonBinary(t))
	d.waitReady(t)
	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	if got := d.execSync(t, id, "ls", "/mnt/image/bin/sh"); got != "/mnt/image/bin/sh" {
		t.Errorf("after a daemon crash ls of the image volume's /bin/sh printed %q", got)
	}

	for _, tc := range []struct {
		name  string
		mount map[string]any
		code  string
		says  string
	}{
		{"escaping sub path", imageVolume("/mnt/v", imageID, "../../etc"), "InvalidArgument", "must be relative without"},
		{"absolute sub path", imageVolume("/mnt/v", imageID, "/etc"), "InvalidArgument", "must be relative"},
		{"read-write", map[string]any{"container_path": "/mnt/v", "image": map[string]any{"image": imageID}}, "InvalidArgument", "must set readonly"},
		{"missing image", imageVolume("/mnt/v", "registry.k8s.io/e2e/not-pulled:1.0", ""), "NotFound", "is not present on this node"},
		{"missing sub path", imageVolume("/mnt/v", imageID, "not-existing"), "InvalidArgument", "does not exist in image"},
	} {
		_, stderr, err := d.create(t, nil, podID, containerConfig(t, "refused-"+strings.ReplaceAll(tc.name, " ", "-"), 0, sleeper, withMounts(tc.mount)), pod)
		requireCode(t, "crictl create with an image volume, "+tc.name, err, stderr, tc.code)
		if !strings.Contains(stderr, tc.says) {
			t.Errorf("image volume, %s: error %q does not say %q", tc.name, stderr, tc.says)
		}
	}
	d.assertNoLeaks(t, podID, id)

	d.removeCtr(t, id)
	if left := volMounts(); len(left) != 0 {
		t.Errorf("overlay mounts left after the container's removal: %v", left)
	}
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.stopClean(t)
}

// TestMissingHostPathCreated: a bind mount whose host path does not exist
// gets it made, as a directory (0755, with its parents), that the container
// writes into and that stays after the container is removed (it is the
// node's, like a kubelet hostPath). A missing host path that is not clean is
// refused with InvalidArgument and not made.
func TestMissingHostPathCreated(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "hostpath", false)
	podID := d.mustRunp(t, pod)
	base := t.TempDir()
	host := filepath.Join(base, "made", "data")
	id := d.run(t, podID, containerConfig(t, "writer", 0, []string{"sh", "-c", "echo from-container > /data/file; sleep 3600"},
		withMounts(map[string]any{"container_path": "/data", "host_path": host})), pod)
	st, err := os.Stat(host)
	if err != nil || !st.IsDir() || st.Mode().Perm()&^0o755 != 0 || st.Mode().Perm()&0o700 != 0o700 {
		t.Fatalf("the missing host path %s: %v, %v; want a directory, mode 0755 or less by the umask", host, st, err)
	}
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		b, _ := os.ReadFile(filepath.Join(host, "file"))
		if string(b) == "from-container\n" {
			return nil
		}
		return fmt.Errorf("the container's file in the created host path reads %q", b)
	})
	d.removeCtr(t, id)
	if _, err := os.Stat(filepath.Join(host, "file")); err != nil {
		t.Errorf("the created host path did not outlive the container: %v", err)
	}

	unclean := base + "/made/../other"
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "unclean", 0, sleeper,
		withMounts(map[string]any{"container_path": "/data", "host_path": unclean})), pod)
	requireCode(t, "crictl create with a missing, unclean host path", err, stderr, "InvalidArgument")
	if !strings.Contains(stderr, "not absolute and clean") {
		t.Errorf("the refusal %q does not say the host path is not clean", stderr)
	}
	if _, err := os.Stat(filepath.Join(base, "other")); err == nil {
		t.Error("the unclean host path was made")
	}
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.stopClean(t)
}

// Triggers of the image volume step for the crash matrix (crash_matrix_test.go):
// the container flows' triggers with a container that has an image volume.
var (
	createImageVolumeTrigger = &crashTrigger{
		how:        "crictl runp, then crictl create of a new container with an image volume",
		variant:    "image volume",
		containers: true,
		provoke: func(t *testing.T, d *daemon, pod string) string {
			return createCrashingContainerWith(t, d, pod, crashImageVolumeConfig)
		},
		settle: func(t *testing.T, d *daemon, pod, crashed string) crashOutcome {
			return settleContainerWith(t, d, pod, crashed, crashImageVolumeConfig)
		},
		allowed: []crashOutcome{outcomeGone, outcomeCached, outcomeCreated},
	}
	rollbackImageVolumeTrigger = &crashTrigger{
		how:        "crictl runp, then crictl create with an image volume whose answer fails (container-create/before-answer=error)",
		variant:    "image volume",
		containers: true,
		alsoArm:    "container-create/before-answer=error",
		provoke:    createImageVolumeTrigger.provoke,
		settle:     createImageVolumeTrigger.settle,
		allowed:    []crashOutcome{outcomeGone},
	}
	removeImageVolumeTrigger = &crashTrigger{
		how:        "crictl runp, create and start a container with an image volume, then RemoveContainer",
		variant:    "image volume",
		containers: true,
		provoke: func(t *testing.T, d *daemon, pod string) string {
			return removeCrashingContainerWith(t, d, pod, crashImageVolumeConfig)
		},
		settle:  createImageVolumeTrigger.settle,
		allowed: []crashOutcome{outcomeGone},
	}
)

// crashImageVolumeConfig is crashContainerConfig's container with the test
// image mounted at /mnt/image, written beside its pod's configuration.
func crashImageVolumeConfig(t *testing.T, pod string) string {
	t.Helper()
	var cfg map[string]any
	b, err := os.ReadFile(crashContainerConfig(t, pod))
	if err != nil {
		t.Fatal(err)
	}
	mustDecode(t, "the crash container's configuration", b, &cfg)
	withMounts(imageVolume("/mnt/image", testImage, ""))(cfg)
	if b, err = json.MarshalIndent(cfg, "", "  "); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(pod), "ctr-crash-image-volume.json")
	writeFile(t, path, string(b), 0o644)
	return path
}
