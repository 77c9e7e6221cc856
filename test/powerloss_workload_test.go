package test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/durable"
	"github.com/google/renameio/v2"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// The workload of TestPowerLoss (powerloss_test.go): what a boot does until the cut.

// workload runs until the power cut: static pods added and removed, creations that time
// out and are left cached, pulls and removals of images, pods made and removed. It writes
// the host's marker once it has begun, so that the cut falls in it.
func (pl *powerLoss) workload(t *testing.T) {
	t.Helper()
	// The kubelet removes the sandboxes it does not know, so the pods crictl makes here
	// cannot live beside it: odd boots keep the kubelet running and add and remove its
	// static pods; even boots stop it (its pods run on) and make crictl's pods, the
	// timed-out creations among them. Both pull and remove images.
	type action struct {
		name   string
		weight int
		run    func(t *testing.T) error
	}
	actions := []action{
		{"pull", 3, pl.pullImage},
		{"remove image", 1, pl.removeImage},
	}
	if pl.boot%2 == 1 {
		actions = append(actions,
			action{"add static pod", 3, pl.addStaticPod},
			action{"remove static pod", 1, pl.removeStaticPod})
	} else {
		pl.k.stop(t)
		actions = append(actions,
			action{"timed-out runp", 2, pl.timedOutRunp},
			action{"pod lifecycle", 2, pl.podLifecycle})
		if !pl.containerd { // conmon is crijournal's: containerd's creations are not slowed here
			actions = append(actions, action{"timed-out create", 2, pl.timedOutCreate})
		}
	}
	total := 0
	for _, a := range actions {
		total += a.weight
	}
	if err := os.WriteFile(filepath.Join(pl.logs, "workload-started"), []byte(time.Now().String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		n := pl.rng.IntN(total)
		for _, a := range actions {
			if n -= a.weight; n < 0 {
				t.Logf("workload %d: %s", i, a.name)
				if err := a.run(t); err != nil {
					pl.record(t, plEvent{Ev: evWorkloadError, Name: a.name, Err: err.Error()})
				}
				break
			}
		}
	}
}

func (pl *powerLoss) addStaticPod(t *testing.T) error {
	names := pl.staticPods(t)
	if len(names) >= plMaxStatic {
		return nil
	}
	name := fmt.Sprintf("pl%d-%d", pl.boot, pl.rng.IntN(1000))
	if err := writeDurably(pl.k.manifestPath(name), staticPod(name, kubeletContainer{name: "main"})); err != nil {
		return err
	}
	pl.record(t, plEvent{Ev: evManifestAdd, Name: name})
	return nil
}

func (pl *powerLoss) removeStaticPod(t *testing.T) error {
	names := pl.staticPods(t)
	if len(names) == 0 {
		return nil
	}
	name := names[pl.rng.IntN(len(names))]
	// Recorded before the file goes: a cut between the two must not make the next check
	// expect a manifest this boot was removing.
	pl.record(t, plEvent{Ev: evManifestDel, Name: name})
	if err := os.Remove(pl.k.manifestPath(name)); err != nil {
		return err
	}
	return durable.SyncDir(pl.k.manifestDir)
}

// pullImage pushes a new image (busybox and a data layer of 2-8 MiB of random bytes) to
// this boot's registry and pulls it.
func (pl *powerLoss) pullImage(t *testing.T) error {
	if len(pl.answeredImages()) > plMaxImages { // the pods' image and plMaxImages more
		return pl.removeImage(t)
	}
	seed := pl.rng.Uint64()
	size := int64(2+pl.rng.IntN(7)) << 20
	repo := fmt.Sprintf("e2e/pl%d-%d", pl.boot, seed%100000)
	img := busyboxWith(t, dataLayer(t, "pl", size, randomBytes, seed))
	ref, err := name.NewTag(pl.registry+"/"+repo+":1.0", name.Insecure)
	if err != nil {
		return err
	}
	if err := remote.Write(ref, img); err != nil {
		return err
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(rand.NewChaCha8(seedBytes(seed)), size)); err != nil {
		return err
	}
	want := testImagePrefix + "/" + repo + ":1.0"
	if _, stderr, err := pl.d.crictl(t, "pull", want); err != nil {
		return fmt.Errorf("crictl pull %s: %v: %s", want, err, stderr)
	}
	out, _, err := pl.d.crictl(t, "inspecti", "-o", "go-template", "--template", "{{.status.id}}", want)
	if err != nil {
		return err
	}
	pl.record(t, plEvent{Ev: evPulled, Name: want, ID: strings.TrimSpace(out), Sum: hex.EncodeToString(h.Sum(nil))})
	return nil
}

func (pl *powerLoss) removeImage(t *testing.T) error {
	var refs []string
	for ref := range pl.answeredImages() {
		if ref != plPodImage { // the pods' image is in use: its removal is refused
			refs = append(refs, ref)
		}
	}
	if len(refs) == 0 {
		return nil
	}
	slices.Sort(refs)
	ref := refs[pl.rng.IntN(len(refs))]
	if _, stderr, err := pl.d.crictl(t, "rmi", ref); err != nil {
		return fmt.Errorf("crictl rmi %s: %v: %s", ref, err, stderr)
	}
	pl.record(t, plEvent{Ev: evImageRemoved, Name: ref})
	return nil
}

// timedOutRunp makes a RunPodSandbox time out during a slow CNI ADD (crictl runp -T 1s,
// a 2 s deadline; the ADD sleeps 6 s), leaving the sandbox to be cached.
func (pl *powerLoss) timedOutRunp(t *testing.T) error {
	dd := pl.d
	name := fmt.Sprintf("pl-runp-%d-%d", pl.boot, pl.rng.IntN(100000))
	pod, err := pl.durableConfig(podConfig(t, name, "pl", randomHex(t, 16), 0, false))
	if err != nil {
		return err
	}
	adds := len(dd.addedIDs(t))
	dd.slowCNI(t, 6*time.Second)
	defer dd.slowCNI(t, 0)
	_, stderr, err := dd.runp(t, "-T", "1s", pod)
	if err == nil || !strings.Contains(stderr, "DeadlineExceeded") {
		return fmt.Errorf("crictl runp -T 1s with a slow network: %v: %s", err, stderr)
	}
	var id string
	if ids := dd.addedIDs(t); len(ids) > adds {
		id = ids[len(ids)-1]
	}
	pl.record(t, plEvent{Ev: evRunpTimeout, Name: name, Pod: pod, ID: id})
	return nil
}

// timedOutCreate makes a CreateContainer time out while conmon is slow (crictl create -T
// 2s; conmon sleeps 6 s), in a pod of its own, leaving the container to be cached.
func (pl *powerLoss) timedOutCreate(t *testing.T) error {
	dd := pl.d
	name := fmt.Sprintf("pl-create-%d-%d", pl.boot, pl.rng.IntN(100000))
	pod, err := pl.durableConfig(dd.containerPod(t, name, false))
	if err != nil {
		return err
	}
	ctr, err := pl.durableConfig(containerConfig(t, name, 0, stopsOnTERM))
	if err != nil {
		return err
	}
	podID, stderr, err := dd.runp(t, pod)
	if err != nil {
		return fmt.Errorf("crictl runp: %v: %s", err, stderr)
	}
	dd.slowConmon(t, 6*time.Second)
	defer dd.slowConmon(t, 0)
	_, stderr, err = dd.create(t, []string{"-T", "2s"}, podID, ctr, pod)
	if err == nil || !strings.Contains(stderr, "DeadlineExceeded") {
		return fmt.Errorf("crictl create -T 2s with a slow conmon: %v: %s", err, stderr)
	}
	pl.record(t, plEvent{Ev: evCreateTimeout, Name: name, Pod: pod, Ctr: ctr, PodID: podID})
	return nil
}

// podLifecycle makes a pod with a running container and removes it.
func (pl *powerLoss) podLifecycle(t *testing.T) error {
	dd := pl.d
	pod := dd.containerPod(t, fmt.Sprintf("pl-life-%d-%d", pl.boot, pl.rng.IntN(100000)), false)
	podID, stderr, err := dd.runp(t, pod)
	if err != nil {
		return fmt.Errorf("crictl runp: %v: %s", err, stderr)
	}
	ctr := containerConfig(t, "main", 0, stopsOnTERM)
	id, stderr, err := dd.create(t, nil, podID, ctr, pod)
	if err != nil {
		return fmt.Errorf("crictl create: %v: %s", err, stderr)
	}
	if _, stderr, err := dd.crictl(t, "start", id); err != nil {
		return fmt.Errorf("crictl start: %v: %s", err, stderr)
	}
	for _, args := range [][]string{{"stopp", podID}, {"rmp", podID}} {
		if _, stderr, err := dd.crictl(t, args...); err != nil {
			return fmt.Errorf("crictl %s: %v: %s", args[0], err, stderr)
		}
	}
	return nil
}

// durableConfig copies a configuration the verification of a later boot reads to the
// disk, durably.
func (pl *powerLoss) durableConfig(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(pl.dir, "configs", filepath.Base(path))
	return dst, writeDurably(dst, string(b))
}

// writeDurably writes a file whole or not at all across a power cut: renameio's temporary
// file, fsynced and renamed over path, then the directory fsynced.
func writeDurably(path, content string) error {
	if err := renameio.WriteFile(path, []byte(content), 0o644); err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(path))
}
