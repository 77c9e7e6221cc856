package test

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// Restore from a checkpoint (issue 51, item 6): CreateContainer whose image is a
// CheckpointContainer archive, or an OCI image holding one, as CRI-O takes them (its
// server/container_restore.go), and StartContainer restoring it with CRIU. The refusals,
// the failed restore and the crashes run on this machine with made-up CRIU images; the
// restores themselves where CRIU works (make test-vm: TestRestoreContainer,
// TestKubeletCheckpointRestore).

// restoresDir is where the daemon keeps restored containers' checkpoint files.
func (d *daemon) restoresDir() string { return filepath.Join(d.root, "restores") }

// fakeArchive writes a checkpoint archive to dir/name as CheckpointContainer writes one,
// of a container of image running counter, but with made-up CRIU images (CRIU refuses
// them): the root filesystem's changes are a file /restored written and /etc/motd
// deleted; mounts are the spec's. Extra entries replace or add to the archive's.
func fakeArchive(t *testing.T, dir, name, image string, mounts []specs.Mount, extra map[string]string) string {
	t.Helper()
	diff := tarBytes(t, map[string]string{"restored": "from the checkpoint\n"})
	spec := specs.Spec{Process: &specs.Process{Args: counter, Cwd: "/", Env: []string{"PATH=/bin:/usr/bin"}},
		Mounts: mounts, Linux: &specs.Linux{MaskedPaths: []string{"/proc/kcore"}}}
	files := map[string]string{
		"checkpoint/inventory.img": "made up",
		"checkpoint/pstree.img":    "made up",
		metadata.ConfigDumpFile:    mustJSON(t, metadata.ContainerConfig{ID: strings.Repeat("c", 64), Name: "counter", RootfsImageName: image}),
		metadata.SpecDumpFile:      mustJSON(t, spec),
		metadata.RootFsDiffTar:     string(diff),
		metadata.DeletedFilesFile:  mustJSON(t, []string{"/etc/motd"}),
	}
	for k, v := range extra {
		files[k] = v
	}
	path := filepath.Join(dir, name)
	writeFile(t, path, string(tarBytes(t, files)), 0o600)
	return path
}

// tarBytes is a tar of files (name to content), in name order.
func tarBytes(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b strings.Builder
	tw := tar.NewWriter(&b)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return []byte(b.String())
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkpointImage is the OCI image CRI-O's documentation has users make of a checkpoint
// archive (buildah from scratch; buildah add the archive; buildah config --annotation
// io.kubernetes.cri-o.annotations.checkpoint.name=<container>; buildah commit): one
// layer holding the archive's files, the annotation on its manifest. Without annotate,
// the same image, unmarked.
func checkpointImage(t *testing.T, archive string, annotate bool) v1.Image {
	t.Helper()
	layer, err := tarball.LayerFromFile(archive, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), layer)
	if err != nil {
		t.Fatal(err)
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if !annotate {
		// Another image ID: the store keys images by their configuration's digest, and
		// reads the manifest last pulled for one.
		cf.Config.Labels = map[string]string{"unmarked": "true"}
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	if annotate {
		img = mutate.Annotations(img, map[string]string{checkpoint.AnnotationCRIOName: "counter"}).(v1.Image)
	}
	return img
}

// startRestoreDaemon starts a daemon pulling from a blob registry that holds the test
// image, and pulls it.
func startRestoreDaemon(t *testing.T) (*daemon, *blobRegistry) {
	t.Helper()
	requirePrereqs(t)
	requireContainerTools(t)
	reg := startBlobRegistry(t)
	reg.push(t, storagetest.BusyboxImage(t), testImageRepo, testImageTag)
	d := startDaemon(t, daemonOptions{registries: reg.mirror()})
	d.pull(t, testImage)
	return d, reg
}

// restoreConfig is a container configuration whose image is a checkpoint (an archive's
// path or a checkpoint image's name): the command is the checkpointed container's, as
// the kubelet's would be.
func restoreConfig(t *testing.T, name, from string, opts ...ctrOption) string {
	t.Helper()
	return containerConfig(t, name, 0, counter, append([]ctrOption{withImage(from)}, opts...)...)
}

// requireNoRestore fails the test if a container restore left anything of it (by
// name: none of the daemon's records has it): a record, a restore directory.
func (d *daemon) requireNoRestore(t *testing.T, why, name string) {
	t.Helper()
	for _, r := range d.containerRecords(t) {
		if strings.Contains(r.Name, "_"+name+"_") {
			t.Errorf("%s: a record of %s is left: %s (state %s)", why, name, r.ID, r.State)
		}
	}
	d.requireRestoreDirs(t, why)
}

// requireRestoreDirs fails the test unless the daemon's restore directories are those
// of the given containers.
func (d *daemon) requireRestoreDirs(t *testing.T, why string, ids ...string) {
	t.Helper()
	var want []string
	for _, id := range ids {
		want = append(want, id+".restore")
	}
	entries, err := os.ReadDir(d.restoresDir())
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	got := names(entries)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s: %s holds %v, want %v", why, d.restoresDir(), got, want)
	}
}

// requireNotRestored fails the test unless container id is created and nothing of a
// restore runs for it: no runtime container, no conmon, its restore steps undone.
func (d *daemon) requireNotRestored(t *testing.T, why, id string) {
	t.Helper()
	d.requireCtrState(t, id, "CONTAINER_CREATED")
	if out, err := exec.Command(runcBinary(t), "--root", d.runcRoot(), "state", id).CombinedOutput(); err == nil {
		t.Errorf("%s: runc knows container %s:\n%s", why, id, out)
	}
	if pids := conmonsOf(id); len(pids) > 0 {
		t.Errorf("%s: conmon of %s still runs: %v", why, id, pids)
	}
	for _, r := range d.containerRecords(t) {
		if r.ID != id {
			continue
		}
		for _, s := range r.Steps {
			if s.Kind == oci.StepRestore && s.Status != journal.StepUndone {
				t.Errorf("%s: the restore step %d of %s is %s, want undone", why, s.Seq, id, s.Status)
			}
		}
	}
}

// conmonsOf returns the PIDs of conmons of container id.
func conmonsOf(id string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(filepath.Base(strings.SplitN(string(b), "\x00", 2)[0]), "conmon") && strings.Contains(string(b), "\x00"+id+"\x00") {
			pids = append(pids, e.Name())
		}
	}
	return pids
}

// rootfsOf returns the root filesystem of container id, from its record.
func (d *daemon) rootfsOf(t *testing.T, id string) string {
	t.Helper()
	for _, r := range d.containerRecords(t) {
		if r.ID == id {
			var obj struct {
				Rootfs string `json:"rootfs"`
			}
			if err := json.Unmarshal(r.Object, &obj); err != nil {
				t.Fatal(err)
			}
			return obj.Rootfs
		}
	}
	t.Fatalf("no record of container %s", id)
	return ""
}

// TestRestoreRefusals: a CreateContainer from a checkpoint that cannot be restored is
// refused, with the code CRI-O's would carry, before anything is made; one that can is
// created, imported and not yet restored; a restore that CRIU refuses leaves the
// container created, with nothing of the restore; removal leaves nothing.
func TestRestoreRefusals(t *testing.T) {
	t.Parallel()
	d, reg := startRestoreDaemon(t)
	dir := t.TempDir()
	good := fakeArchive(t, dir, "good.tar", testImage, nil, nil)
	notTar := filepath.Join(dir, "not.tar")
	writeFile(t, notTar, strings.Repeat("not a tar\n", 200), 0o600)
	otherTar := filepath.Join(dir, "other.tar")
	writeFile(t, otherTar, string(tarBytes(t, map[string]string{"etc/passwd": "root:x:0:0::/:/bin/sh\n"})), 0o600)
	absentImage := fakeArchive(t, dir, "absent-image.tar", testImagePrefix+"/e2e/absent:1.0", nil, nil)
	withBind := fakeArchive(t, dir, "bind.tar", testImage,
		[]specs.Mount{{Destination: "/data", Type: "bind", Source: "/var/lib/data"}, {Destination: "/etc/hosts", Type: "bind", Source: "/x/hosts"}}, nil)
	goodImage := reg.push(t, checkpointImage(t, good, true), "e2e/counter-checkpoint", "1.0")
	unmarked := reg.push(t, checkpointImage(t, good, false), "e2e/unmarked", "1.0")
	notCheckpoint := reg.push(t, checkpointImage(t, otherTar, true), "e2e/not-checkpoint", "1.0")
	for _, ref := range []string{goodImage, unmarked, notCheckpoint} {
		d.pull(t, ref)
	}
	pod := d.containerPod(t, "restore-refusals", false)
	podID := d.mustRunp(t, pod)
	taken := d.mustCreate(t, podID, containerConfig(t, "taken", 0, sleeper), pod)

	for _, tc := range []struct {
		name, from, code, says string
		opts                   []ctrOption
	}{
		{"missing archive", filepath.Join(dir, "missing.tar"), "NotFound", "does not exist", nil},
		{"a directory", dir, "InvalidArgument", "not a regular file", nil},
		{"not a tar", notTar, "InvalidArgument", "not a tar archive", nil},
		{"a tar of something else", otherTar, "InvalidArgument", "lacks checkpoint/", nil},
		{"the checkpointed image absent", absentImage, "NotFound", "e2e/absent:1.0, which is not present on this node", nil},
		{"a bind mount not in the request", withBind, "InvalidArgument", "bind mounts at /data", nil},
		{"an annotated image without a checkpoint", notCheckpoint, "InvalidArgument", "lacks checkpoint/", nil},
		// Into the pod, under a name a container of it has: the name is taken.
		{"a name taken in the pod", good, "AlreadyExists", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "refused"
			if tc.code == "AlreadyExists" {
				name = "taken"
			}
			_, stderr, err := d.create(t, nil, podID, restoreConfig(t, name, tc.from, tc.opts...), pod)
			requireCode(t, "crictl create from "+tc.name, err, stderr, tc.code)
			if !strings.Contains(stderr, tc.says) {
				t.Errorf("crictl create from %s: the error does not say %q:\n%s", tc.name, tc.says, stderr)
			}
			d.requireNoRestore(t, "after a refused restore", "refused")
		})
	}
	// An image that holds a checkpoint's files but is unmarked is an ordinary image:
	// the runtime creates a container of it, and finds no sh in it.
	if _, stderr, err := d.create(t, nil, podID, restoreConfig(t, "unmarked", unmarked), pod); err == nil || !strings.Contains(stderr, "executable file not found") {
		t.Errorf("crictl create from an unmarked image holding a checkpoint: %v, want runc's refusal of its missing sh:\n%s", err, stderr)
	}
	d.requireNoRestore(t, "an unmarked image", "unmarked")

	// The bind mount given: accepted.
	bound := d.mustCreate(t, podID, restoreConfig(t, "bound", withBind, withMount("/data", dir)), pod)

	// From the archive, and from the checkpoint image: created, imported, not restored.
	fromArchive := d.mustCreate(t, podID, restoreConfig(t, "from-archive", good), pod)
	fromImage := d.mustCreate(t, podID, restoreConfig(t, "from-image", goodImage), pod)
	d.requireRestoreDirs(t, "after the creations", bound, fromArchive, fromImage)
	for _, id := range []string{fromArchive, fromImage} {
		st := d.requireCtrState(t, id, "CONTAINER_CREATED")
		if st.Status.ImageRef == "" {
			t.Errorf("restored container %s has no image ref", id)
		}
		imported := filepath.Join(d.restoresDir(), id+".restore")
		for _, f := range []string{"checkpoint/inventory.img", checkpoint.SpecFile, metadata.ConfigDumpFile} {
			if _, err := os.Stat(filepath.Join(imported, f)); err != nil {
				t.Errorf("container %s: the import lacks %s: %v", id, f, err)
			}
		}
		rootfs := d.rootfsOf(t, id)
		if b, err := os.ReadFile(filepath.Join(rootfs, "restored")); err != nil || string(b) != "from the checkpoint\n" {
			t.Errorf("container %s: rootfs-diff.tar is not applied: /restored: %q, %v", id, b, err)
		}
		if _, err := os.Lstat(filepath.Join(rootfs, "etc/motd")); !os.IsNotExist(err) {
			t.Errorf("container %s: /etc/motd, in deleted.files, is still there: %v", id, err)
		}
		var spec specs.Spec
		b, _ := os.ReadFile(filepath.Join(imported, checkpoint.SpecFile))
		if err := json.Unmarshal(b, &spec); err != nil || spec.Process == nil || !slices.Equal(spec.Process.Args, counter) {
			t.Errorf("container %s: the restore's spec does not run the checkpointed process: %v, %s", id, err, b)
		}
	}
	// A created container that awaits its restore is not taken for lost.
	time.Sleep(time.Second)
	d.requireNotRestored(t, "before the start", fromArchive)

	// CRIU refuses the made-up images: the start fails, the container stays created,
	// nothing of the restore is left, and a second start fails the same way.
	for i := range 2 {
		_, stderr, err := d.crictl(t, "start", fromArchive)
		if err == nil {
			t.Fatalf("crictl start of a container restored from made-up CRIU images succeeded")
		}
		t.Logf("start %d: %s", i, strings.TrimSpace(stderr))
		d.requireNotRestored(t, "after a failed restore", fromArchive)
	}
	d.requireRestoreDirs(t, "after the failed restores", bound, fromArchive, fromImage)

	for _, id := range []string{bound, fromArchive, fromImage, taken} {
		d.removeCtr(t, id)
	}
	d.requireRestoreDirs(t, "after the removals")
	d.removePod(t, podID)
	d.assertNoLeaks(t)
}

// TestRestoreCrash kills the daemon at each step of a restore: in CreateContainer's
// import (its intent committed; done), and in StartContainer's restore (its intent
// committed). The restart leaves nothing of a creation cut short, and of a restore cut
// short leaves the container created, its restore undone.
func TestRestoreCrash(t *testing.T) {
	t.Parallel()
	d, _ := startRestoreDaemon(t)
	archive := fakeArchive(t, t.TempDir(), "x.tar", testImage, nil, nil)
	pod := d.containerPod(t, "restore-crash", false)
	podID := d.mustRunp(t, pod)
	for _, point := range []string{
		"container-create/" + string(checkpoint.StepImport) + "/after-intent",
		"container-create/" + string(checkpoint.StepImport) + "/after-action",
	} {
		t.Run(point, func(t *testing.T) {
			d.restartArmed(t, point)
			if _, _, err := d.create(t, nil, podID, restoreConfig(t, "crashed", archive), pod); err == nil {
				t.Fatal("crictl create succeeded: the daemon did not crash")
			}
			d.requireKilledAt(t, point, 60*time.Second)
			if entries, _ := os.ReadDir(d.restoresDir()); strings.HasSuffix(point, "after-action") && len(entries) == 0 {
				t.Errorf("no restore directory after a crash once the import was done: the test tests nothing")
			}
			d.restartUnarmed(t)
			d.requireNoRestore(t, "after a crash at "+point+" and a restart", "crashed")
			d.assertNoLeaks(t, podID)
		})
	}

	id := d.mustCreate(t, podID, restoreConfig(t, "restore", archive), pod)
	point := "container-start/" + string(oci.StepRestore) + "/after-intent"
	t.Run(point, func(t *testing.T) {
		d.restartArmed(t, point)
		if _, _, err := d.crictl(t, "start", id); err == nil {
			t.Fatal("crictl start succeeded: the daemon did not crash")
		}
		d.requireKilledAt(t, point, 60*time.Second)
		d.restartUnarmed(t)
		d.requireNotRestored(t, "after a crash at "+point+" and a restart", id)
		d.requireRestoreDirs(t, "after a crash at "+point+" and a restart", id)
	})
	d.removeCtr(t, id)
	d.requireRestoreDirs(t, "after the removal")
	d.removePod(t, podID)
	d.assertNoLeaks(t)
}

// TestRestoreContainer restores a counter from its checkpoint into new pods, from the
// archive and from a checkpoint image: the count goes on from where the checkpoint took
// it, in the new pod, while the original runs on. A crash once the restore is done but
// before it is recorded is undone by the restart, and a second start restores again.
// CRIU must work (make test-vm).
func TestRestoreContainer(t *testing.T) {
	t.Parallel()
	requireCriuWorks(t)
	d, reg := startRestoreDaemon(t)
	pod := d.containerPod(t, "checkpointed", false)
	podID := d.mustRunp(t, pod)
	orig := d.run(t, podID, containerConfig(t, "counter", 0, counter), pod)
	d.waitLog(t, orig, "count 5", 30*time.Second)
	archive := filepath.Join(t.TempDir(), "counter.tar")
	d.mustCrictl(t, "checkpoint", "--export="+archive, orig)
	atCheckpoint, _ := d.lastCount(t, orig)
	image := reg.push(t, checkpointImage(t, archive, true), "e2e/counter-checkpoint", "1.0")
	d.pull(t, image)

	restoreInto := func(t *testing.T, podName, from string) (string, string) {
		t.Helper()
		newPod := d.containerPod(t, podName, false)
		newPodID := d.mustRunp(t, newPod)
		id := d.mustCreate(t, newPodID, restoreConfig(t, "counter", from), newPod)
		d.requireCtrState(t, id, "CONTAINER_CREATED")
		return newPodID, id
	}
	// requireGoesOn fails the test unless restored container id counts on from the
	// checkpoint: its first count follows one the original logged by then, it never
	// counts 1, and it keeps counting.
	requireGoesOn := func(t *testing.T, id string) {
		t.Helper()
		d.requireCtrState(t, id, "CONTAINER_RUNNING")
		d.waitLog(t, id, "count ", 30*time.Second)
		first := 0
		for _, m := range countRE.FindAllStringSubmatch(d.mustCrictl(t, "logs", id), 1) {
			fmt.Sscan(m[1], &first)
		}
		if first < 2 || first > atCheckpoint+1 {
			t.Errorf("the restored counter began at %d, want the count after the checkpoint's (the original had logged %d by then)", first, atCheckpoint)
		}
		t.Logf("the restored counter began at %d (the checkpoint was taken at count %d or before)", first, atCheckpoint)
		d.waitLog(t, id, fmt.Sprintf("count %d", first+5), 30*time.Second)
		if _, ones := d.lastCount(t, id); ones != 0 {
			t.Errorf("the restored counter counted 1: it started again instead of going on")
		}
		// The counter truncates /state before it writes the count: a read may find it
		// empty.
		testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() error {
			raw := d.execSync(t, id, "cat", "/state")
			if state, err := strconv.Atoi(raw); err != nil || state < first {
				return fmt.Errorf("the restored container's /state is %q, want the count it went on from, %d, or more", raw, first)
			}
			return nil
		})
	}

	for _, tc := range []struct{ name, from string }{{"archive", archive}, {"image", image}} {
		t.Run(tc.name, func(t *testing.T) {
			newPodID, id := restoreInto(t, "restored-"+tc.name, tc.from)
			d.mustCrictl(t, "start", id)
			requireGoesOn(t, id)
			d.requireRestoreDirs(t, "after a restore (its images are removed)")
			d.removeCtr(t, id)
			d.removePod(t, newPodID)
		})
	}

	point := "container-start/" + string(oci.StepRestore) + "/after-action"
	t.Run(point, func(t *testing.T) {
		newPodID, id := restoreInto(t, "restored-crash", archive)
		d.restartArmed(t, point)
		if _, _, err := d.crictl(t, "start", id); err == nil {
			t.Fatal("crictl start succeeded: the daemon did not crash")
		}
		d.requireKilledAt(t, point, 120*time.Second)
		d.restartUnarmed(t)
		d.requireNotRestored(t, "after a crash at "+point+" and a restart", id)
		d.mustCrictl(t, "start", id)
		requireGoesOn(t, id)
		d.removeCtr(t, id)
		d.removePod(t, newPodID)
	})

	// The original ran on.
	d.requireCtrState(t, orig, "CONTAINER_RUNNING")
	d.removeCtr(t, orig)
	d.removePod(t, podID)
	d.requireRestoreDirs(t, "at the end")
	d.assertNoLeaks(t)
}
