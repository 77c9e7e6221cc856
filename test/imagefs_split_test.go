package test

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// criFsUsage is one filesystem of crictl imagefsinfo -o json.
type criFsUsage struct {
	FsID struct {
		Mountpoint string `json:"mountpoint"`
	} `json:"fsId"`
	UsedBytes struct {
		Value string `json:"value"`
	} `json:"usedBytes"`
	InodesUsed struct {
		Value string `json:"value"`
	} `json:"inodesUsed"`
}

func (u criFsUsage) used(t *testing.T) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(u.UsedBytes.Value, 10, 64)
	if err != nil {
		t.Fatalf("used bytes %q of %s: %v", u.UsedBytes.Value, u.FsID.Mountpoint, err)
	}
	return n
}

// imageFsInfo returns crictl imagefsinfo's image and container filesystems, requiring one
// of each.
func (d *daemon) imageFsInfo(t *testing.T) (images, containers criFsUsage) {
	t.Helper()
	out := d.mustCrictl(t, "imagefsinfo", "-o", "json")
	var resp struct {
		Status struct {
			ImageFilesystems     []criFsUsage `json:"imageFilesystems"`
			ContainerFilesystems []criFsUsage `json:"containerFilesystems"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("crictl imagefsinfo -o json: %v\n%s", err, out)
	}
	if len(resp.Status.ImageFilesystems) != 1 || len(resp.Status.ContainerFilesystems) != 1 {
		// The kubelet's cadvisor stats provider with KubeletSeparateDiskGC refuses an
		// answer without both ("missing image stats": cadvisor_stats_provider.go, v1.37.2).
		t.Fatalf("crictl imagefsinfo: want one image and one container filesystem:\n%s", out)
	}
	return resp.Status.ImageFilesystems[0], resp.Status.ContainerFilesystems[0]
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory and returns it; the test's
// cleanup unmounts it (after the daemon's, registered later, has stopped the daemon).
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// deviceOf returns the device number of the file system path is on.
func deviceOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}

// findFile returns the regular files named name under dir (not crossing into other file
// systems: a container's mounted root filesystem is not the layer that holds its files).
func findFile(t *testing.T, dir, name string) []string {
	t.Helper()
	dev := deviceOf(t, dir)
	var found []string
	err := filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil // removed meanwhile, or unreadable: not what is looked for
		}
		info, err := e.Info()
		if err != nil {
			return nil
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Dev != dev {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.Type().IsRegular() && e.Name() == name {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// TestSplitImageFs: with image_store on a file system of its own (a tmpfs) and the
// storage root on another (the daemon's root, a tmpfs too), a pulled image's files land
// in the image store and nowhere in the storage root, a container's writes land in the
// storage root and nowhere in the image store, and crictl imagefsinfo reports the two
// apart: image_filesystems the image store, counting the image and not what the
// container wrote, container_filesystems the storage root, counting the container's
// writes. This is the kubelet's KubeletSeparateDiskGC (on since 1.31): its cadvisor stats
// provider takes the image file system as split when the two mount points differ
// (pkg/kubelet/stats/cadvisor_stats_provider.go, v1.37.2). On vfs and on overlay.
func TestSplitImageFs(t *testing.T) {
	t.Parallel()
	for _, driver := range []string{"vfs", "overlay"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			imageStore := filepath.Join(mountTmpfs(t, 512<<20), "images")
			reg := startImageRegistry(t)
			d := startDaemon(t, daemonOptions{
				registries:    reg.mirror(),
				storageDriver: driver,
				rootFSSize:    512 << 20,
				extraTOML:     []string{"image_store = " + strconv.Quote(imageStore)},
			})
			storageRoot := d.storageRoot()
			if deviceOf(t, d.root) == deviceOf(t, filepath.Dir(imageStore)) {
				t.Fatalf("the daemon's root %s and the image store %s are on one file system", d.root, imageStore)
			}
			imagesBefore, _ := d.imageFsInfo(t)
			d.pull(t, testImage)

			// The image's files: its busybox binary, in the image store's layers only.
			if got := findFile(t, imageStore, "busybox"); len(got) == 0 {
				t.Errorf("no busybox of the image under the image store %s", imageStore)
			}
			if got := findFile(t, storageRoot, "busybox"); len(got) != 0 {
				t.Errorf("the image's files are in the storage root: %v", got)
			}
			images, containers := d.imageFsInfo(t)
			if images.FsID.Mountpoint != imageStore || containers.FsID.Mountpoint != storageRoot {
				t.Fatalf("crictl imagefsinfo: image filesystem %q, container filesystem %q; want the image store %s and the storage root %s",
					images.FsID.Mountpoint, containers.FsID.Mountpoint, imageStore, storageRoot)
			}
			// busybox-static is about 2 MB.
			if images.used(t) < imagesBefore.used(t)+1<<20 {
				t.Errorf("the image filesystem's used bytes went from %d to %d with the pull; want the image counted", imagesBefore.used(t), images.used(t))
			}

			pod := d.containerPod(t, "split-imagefs", false)
			podID := d.mustRunp(t, pod)
			ctr := d.run(t, podID, containerConfig(t, "writer", 0, []string{"sh", "-c",
				"dd if=/dev/zero of=/written-by-the-container bs=1M count=8 && echo written && sleep 3600"}), pod)
			d.waitLog(t, ctr, "written", 30*time.Second)
			written := findFile(t, storageRoot, "written-by-the-container")
			if len(written) != 1 {
				t.Errorf("the container's file is %d times in the storage root %s (%v), want once, in its writable layer", len(written), storageRoot, written)
			}
			if got := findFile(t, imageStore, "written-by-the-container"); len(got) != 0 {
				t.Errorf("the container's file is in the image store: %v", got)
			}

			// The writable layers are measured in the background (stats_collect_period 1s
			// in the tests): the 8 MiB show in container_filesystems within a few passes.
			var after, afterImages criFsUsage
			testenv.Eventually(t, 30*time.Second, 250*time.Millisecond, testenv.Until("the container's 8 MiB in container_filesystems", func() bool {
				afterImages, after = d.imageFsInfo(t)
				return after.used(t) >= containers.used(t)+8<<20
			}))
			t.Logf("imagefsinfo: before the pull images %s; after it images %s, containers %s; after the container wrote 8 MiB images %s, containers %s",
				imagesBefore.UsedBytes.Value, images.UsedBytes.Value, containers.UsedBytes.Value, afterImages.UsedBytes.Value, after.UsedBytes.Value)
			if afterImages.used(t) != images.used(t) {
				t.Errorf("the image filesystem's used bytes went from %d to %d while only the container wrote", images.used(t), afterImages.used(t))
			}
			// The file systems agree: the storage root's tmpfs holds the 8 MiB.
			var st unix.Statfs_t
			if err := unix.Statfs(storageRoot, &st); err != nil {
				t.Fatal(err)
			}
			if used := (st.Blocks - st.Bfree) * uint64(st.Bsize); used < 8<<20 {
				t.Errorf("the storage root's file system has %d bytes used, want the container's 8 MiB", used)
			}
			d.mustCrictl(t, "rmp", "-f", podID)
		})
	}
}

// TestImageFsNotSplit: without image_store, crictl imagefsinfo reports the storage root as
// both the image and the container filesystem, with the same figures, as CRI-O does: the
// kubelet's cadvisor stats provider then sees no split (equal mount points), and with
// KubeletSeparateDiskGC refuses an answer that lacks container_filesystems.
func TestImageFsNotSplit(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	images, containers := d.imageFsInfo(t)
	if images.FsID.Mountpoint != d.storageRoot() || containers.FsID.Mountpoint != d.storageRoot() {
		t.Errorf("crictl imagefsinfo: image filesystem %q, container filesystem %q; want the storage root %s in both",
			images.FsID.Mountpoint, containers.FsID.Mountpoint, d.storageRoot())
	}
	if images.UsedBytes != containers.UsedBytes || images.InodesUsed != containers.InodesUsed || images.used(t) < 1<<20 {
		t.Errorf("crictl imagefsinfo: image filesystem %+v, container filesystem %+v; want one figure, with the image in it", images, containers)
	}
}

// kubeletFsStats is one file system of the kubelet's /stats/summary.
type kubeletFsStats struct {
	CapacityBytes  *uint64 `json:"capacityBytes"`
	AvailableBytes *uint64 `json:"availableBytes"`
	UsedBytes      *uint64 `json:"usedBytes"`
}

// runtimeFs reads the read-only port's /stats/summary: the kubelet's image and container
// file systems (node.runtime).
func (k *kubelet) runtimeFs() (imageFs, containerFs kubeletFsStats, err error) {
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/stats/summary", k.readOnlyPort))
	if err != nil {
		return imageFs, containerFs, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return imageFs, containerFs, err
	}
	if resp.StatusCode != http.StatusOK {
		return imageFs, containerFs, fmt.Errorf("GET /stats/summary: %s: %s", resp.Status, body)
	}
	var summary struct {
		Node struct {
			Runtime struct {
				ImageFs     kubeletFsStats `json:"imageFs"`
				ContainerFs kubeletFsStats `json:"containerFs"`
			} `json:"runtime"`
		} `json:"node"`
	}
	if err := json.Unmarshal(body, &summary); err != nil {
		return imageFs, containerFs, fmt.Errorf("GET /stats/summary: %v\n%s", err, body)
	}
	return summary.Node.Runtime.ImageFs, summary.Node.Runtime.ContainerFs, nil
}

// fsCapacity returns the size in bytes of the file system path is on.
func fsCapacity(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * uint64(st.Bsize)
}

// TestKubeletSplitImageFs: a real kubelet (v1.37.2) on a daemon whose image_store is on a
// file system of its own measures that file system as its image file system, the one its
// image garbage collection and imagefs eviction signals watch: /stats/summary's
// node.runtime.imageFs has the image store's capacity (a 384 MiB tmpfs), not the storage
// root's (the machine's disk under /tmp). The kubelet's CRI stats provider, which it uses with crijournal,
// reads image_filesystems[0] and reports it as containerFs too ("For CRI Stats Provider we
// don't support separate disks yet", pkg/kubelet/stats/cri_stats_provider.go): the
// container file system the daemon reports apart is for its cadvisor stats provider and
// crictl.
func TestKubeletSplitImageFs(t *testing.T) {
	t.Parallel()
	requireKubelet(t)
	imageStore := filepath.Join(mountTmpfs(t, 384<<20), "images")
	reg := startImageRegistry(t)
	d := startDaemon(t, daemonOptions{
		registries: reg.mirror(),
		extraTOML:  []string{"image_store = " + strconv.Quote(imageStore)},
	})
	d.pull(t, testImage)
	imageCap, rootCap := fsCapacity(t, filepath.Dir(imageStore)), fsCapacity(t, d.storageRoot())
	if imageCap == rootCap {
		t.Fatalf("the image store's and the storage root's file systems are both %d bytes: the test cannot tell them apart", imageCap)
	}
	k := startKubelet(t, d, kubeletOptions{})
	var imageFs, containerFs kubeletFsStats
	// cadvisor has no file system figures for the first seconds.
	testenv.Eventually(t, 90*time.Second, time.Second, testenv.Until("the kubelet's /stats/summary to give the image file system's capacity", func() bool {
		var err error
		imageFs, containerFs, err = k.runtimeFs()
		return err == nil && imageFs.CapacityBytes != nil
	}))
	if *imageFs.CapacityBytes != imageCap {
		t.Errorf("the kubelet's image file system is %d bytes; want the image store's %d (the storage root's is %d)", *imageFs.CapacityBytes, imageCap, rootCap)
	}
	if imageFs.UsedBytes == nil || *imageFs.UsedBytes < 1<<20 {
		t.Errorf("the kubelet's image file system uses %v bytes; want the image's (over 1 MiB)", imageFs.UsedBytes)
	}
	var used, containerCap uint64
	if imageFs.UsedBytes != nil {
		used = *imageFs.UsedBytes
	}
	if containerFs.CapacityBytes != nil {
		containerCap = *containerFs.CapacityBytes
	}
	t.Logf("kubelet: image file system %d bytes, %d used, container file system %d bytes (the image one, from its CRI stats provider); image store %d bytes, storage root %d bytes",
		*imageFs.CapacityBytes, used, containerCap, imageCap, rootCap)
	k.stop(t)
	d.stopClean(t)
}
