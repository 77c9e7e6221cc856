package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/layout"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// TestPowerLoss is one boot of `make test-powerloss` (test/vm/powerloss.sh): it runs in
// the emulated VM, whose persistent disk (ext4 on a virtio disk, checked with e2fsck -p at
// boot) holds the node's state, and QEMU is killed from the host at a seeded random moment
// of the workload: a power cut, which loses what the guest's page cache held.
//
// Each boot first checks what the previous cuts left (verify), then, unless it is the
// last, runs the workload until the cut comes:
//   - the daemon starts; recovery converges (no record left creating or undoing) and
//     `crijournal inspect --leaks` finds nothing the journal does not account for
//     (namespace pins, mounts, host-local IP files, veths, libcni cache entries, storage
//     and runtime containers, conmons, cgroups);
//   - every image whose pull was answered is listed with the same ID, and its data layer
//     reads back whole in a container (sha256 of the file);
//   - every static pod whose manifest is on the disk is Running again under a real
//     kubelet;
//   - every creation cached by a timed-out `crictl runp -T` or `crictl create -T` is
//     claimed by its retry with the same ID, or was rolled back (never half there).
//
// What the workload did is appended, one JSON line per event, to the events file on the
// host (CRIJOURNAL_POWERLOSS_EVENTS, through 9p, so the cut cannot lose it); an event that
// an answer makes true is written only after the answer came, so a cut between the two
// only makes the next check expect less.
//
// Every check that does not hold is a finding: an event of its own (failed-start, leak,
// lost-image, pod-not-back, half-present, manifest-lost) and, for crijournal, a test
// failure. With CRIJOURNAL_POWERLOSS_RUNTIME=containerd the same workload and cuts run
// against containerd 2.x (the anchor, powerloss_containerd_test.go): its findings are
// measurements, counted by powerloss.sh, not failures.
//
// Environment (set by powerloss.sh): CRIJOURNAL_POWERLOSS_NODE (the disk's mount point),
// _EVENTS, _BOOT (1, 2, ...), _SEED, _MODE ("cut": verify then the workload until the
// cut; "final": verify, then remove everything and check the node and the journal clean),
// _LOGS (a host directory for this boot's daemon and kubelet logs), _RUNTIME
// (crijournal, the default, or containerd), _CONTAINERD (containerd's directory).
func TestPowerLoss(t *testing.T) {
	nodeDir := os.Getenv("CRIJOURNAL_POWERLOSS_NODE")
	if nodeDir == "" {
		t.Skip("run in the emulated VM by make test-powerloss (test/vm/powerloss.sh)")
	}
	boot, _ := strconv.Atoi(os.Getenv("CRIJOURNAL_POWERLOSS_BOOT"))
	seed, _ := strconv.ParseUint(os.Getenv("CRIJOURNAL_POWERLOSS_SEED"), 10, 64)
	mode := os.Getenv("CRIJOURNAL_POWERLOSS_MODE")
	pl := &powerLoss{
		boot:       boot,
		rng:        rand.New(rand.NewPCG(seed, uint64(boot))),
		events:     os.Getenv("CRIJOURNAL_POWERLOSS_EVENTS"),
		logs:       os.Getenv("CRIJOURNAL_POWERLOSS_LOGS"),
		dir:        nodeDir,
		containerd: os.Getenv("CRIJOURNAL_POWERLOSS_RUNTIME") == "containerd",
	}
	pl.setUp(t)
	pl.verify(t)
	pl.record(t, plEvent{Ev: "verified"})
	switch {
	case mode == "final" && pl.containerd:
		pl.finalContainerd(t)
		return
	case mode == "final":
		pl.final(t)
		return
	}
	pl.workload(t)
}

// plEvent is one line of the events file.
type plEvent struct {
	Boot  int    `json:"boot"`
	Ev    string `json:"ev"`
	Name  string `json:"name,omitempty"`  // a static pod, a pod's or a container's name, an image reference
	ID    string `json:"id,omitempty"`    // a sandbox's, container's or image's ID
	Pod   string `json:"pod,omitempty"`   // a pod configuration's path (on the disk)
	Ctr   string `json:"ctr,omitempty"`   // a container configuration's path (on the disk)
	PodID string `json:"podID,omitempty"` // the sandbox a container creation was for
	Sum   string `json:"sum,omitempty"`   // the sha256 of an image's data file
	Err   string `json:"err,omitempty"`
}

// Events of the workload, by name.
const (
	evPulled        = "pulled"           // a pull was answered: Name, ID, Sum
	evImageRemoved  = "image-removed"    // a RemoveImage was answered: Name
	evManifestAdd   = "manifest-added"   // a static pod's manifest is on the disk (fsynced): Name
	evManifestDel   = "manifest-removed" // recorded before the removal: the manifest may be there or not
	evRunpTimeout   = "runp-timeout"     // crictl runp -T failed with DeadlineExceeded: Name, Pod, ID (from CNI's ADD)
	evCreateTimeout = "create-timeout"   // crictl create -T failed with DeadlineExceeded: Name, Pod, Ctr, PodID
	evRetried       = "retried"          // a timed-out creation's retry got its object and removed it: Name
	evWorkloadError = "workload-error"   // a call of the workload failed unexpectedly: Err
	evFinding       = "finding"          // a check after a cut that did not hold: Name (its class), Err
)

// Classes of findings.
const (
	findFailedStart = "failed-start"
	findLeak        = "leak"
	findLostImage   = "lost-image"
	findPodNotBack  = "pod-not-back"
	findHalfPresent = "half-present"
	findManifest    = "manifest-lost"
)

// finding records a check that did not hold: a failure of the test for crijournal, a
// measurement for the anchor.
func (pl *powerLoss) finding(t *testing.T, class, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	pl.record(t, plEvent{Ev: evFinding, Name: class, Err: msg})
	if pl.containerd {
		t.Logf("finding (%s): %s", class, msg)
		return
	}
	t.Errorf("%s: %s", class, msg)
}

// powerLoss is one boot's node: a daemon and a kubelet whose state is on the disk.
type powerLoss struct {
	boot   int
	rng    *rand.Rand
	events string
	logs   string
	dir    string // the disk's mount point

	d        *daemon
	k        *kubelet
	registry string // host:port of this boot's registry
	past     []plEvent

	containerd bool          // the anchor: containerd 2.x instead of crijournal
	ctd        *plContainerd // its process and paths
}

// The node's fixed network and the kubelet's name: the same at every boot.
const (
	plBridge   = "cjpl0"
	plSubnet   = "10.201.7.0/24"
	plNodeName = "plnode"
	plPodImage = testImage // what the static pods and the timed-out creations run
	// The workload keeps at most this many static pods and pulled images.
	plMaxStatic = 3
	plMaxImages = 4
)

// setUp lays the node out on the disk (the state) and on /run (what a reboot empties),
// reads the events of the earlier boots and starts this boot's registry.
func (pl *powerLoss) setUp(t *testing.T) {
	t.Helper()
	requirePrereqs(t)
	requireContainerTools(t)
	storagetest.RequireBusybox(t)
	disk := func(p string) string { return filepath.Join(pl.dir, p) }
	run := "/run/crijournal-pl"
	d := &daemon{
		opts: daemonOptions{
			cacheTTL:       10 * time.Minute, // cached creations wait for their retry across the cut
			sweepInterval:  time.Second,
			networkTimeout: 5 * time.Minute,
			storageDriver:  "overlay",
			conmonPath:     conmonWrapper(t),
		},
		base:       disk("node"),
		root:       disk("node/root"),
		runRoot:    filepath.Join(run, "run"),
		socket:     filepath.Join(run, "crijournal.sock"),
		nriSocket:  filepath.Join(run, "nri.sock"),
		nsDir:      filepath.Join(run, "ns"),
		confDir:    disk("node/net.d"),
		pluginDir:  disk("node/plugins"),
		cacheDir:   disk("node/cni-cache"),
		ipamDir:    disk("node/ipam"),
		configPath: disk("node/crijournal.toml"),
		logPath:    filepath.Join(pl.logs, "daemon.log"),
		network:    "cjpl",
		bridge:     plBridge,
		subnet:     plSubnet,
		gateway:    "10.201.7.1",
	}
	d.podLogDir = disk("node/pod-logs")
	d.cgroupParent = "/cjpl"
	d.node = layout.Node{Root: d.root, RunRoot: d.runRoot, Socket: d.socket, NamespaceDir: d.nsDir, CNIConfDir: d.confDir,
		CNICacheDir: d.cacheDir, RuntimeRoots: map[string]string{"runc": filepath.Join(d.runRoot, "runc")}}
	d.ociStateDir = d.node.ConmonState("runc").Dir()
	for _, dir := range []string{d.root, d.runRoot, d.nsDir, d.confDir, d.pluginDir, d.cacheDir, d.ipamDir, d.podLogDir, disk("configs")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pl.past = pl.readEvents(t)

	pl.registry = storagetest.StartRegistry(t)
	storagetest.PushBusybox(t, pl.registry, testImageRepo, testImageTag)
	d.opts.registries = []registryMirror{{prefix: testImagePrefix, location: pl.registry, insecure: true}}
	d.writeCNIConfig(t)
	d.writeWrapper(t)
	d.writeNodeFiles(t)
	d.writeConfig(t)
	// Whatever a cut left of the wrapper's knobs: this boot's calls are fast.
	d.slowCNI(t, 0)
	pl.d = d

	k := &kubelet{
		d:            d,
		opts:         kubeletOptions{runtimeRequestTimeout: 2 * time.Minute, syncFrequency: 5 * time.Second, fileCheckFrequency: 2 * time.Second, verbosity: 1},
		dir:          disk("kubelet"),
		rootDir:      disk("kubelet/root"),
		manifestDir:  disk("kubelet/manifests"),
		podLogsDir:   disk("node/pod-logs"),
		certDir:      filepath.Join(run, "kubelet-pki"),
		configPath:   filepath.Join(run, "kubelet.json"),
		logPath:      filepath.Join(pl.logs, "kubelet.log"),
		nodeName:     plNodeName,
		readOnlyPort: freeLoopbackPort(t),
	}
	for _, p := range []string{k.rootDir, k.manifestDir, k.certDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	k.writeConfig(t)
	pl.k = k
	if pl.containerd {
		pl.setUpContainerd(t)
	}
}

// readEvents reads the events of the earlier boots.
func (pl *powerLoss) readEvents(t *testing.T) []plEvent {
	t.Helper()
	b, err := os.ReadFile(pl.events)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var evs []plEvent
	for _, line := range strings.Split(string(b), "\n") {
		var ev plEvent
		if line == "" || json.Unmarshal([]byte(line), &ev) != nil {
			continue // a line the cut tore: its event did not happen as far as checks go
		}
		evs = append(evs, ev)
	}
	return evs
}

// record appends ev to the events file (on the host: the cut cannot lose it) and to the
// boot's own view of them, which the workload's choices read.
func (pl *powerLoss) record(t *testing.T, ev plEvent) {
	t.Helper()
	ev.Boot = pl.boot
	pl.past = append(pl.past, ev)
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(pl.events, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_SYNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	t.Logf("event: %s", b)
}

// verify starts the runtime on what the cuts left and checks it (see TestPowerLoss).
func (pl *powerLoss) verify(t *testing.T) {
	t.Helper()
	start := time.Now()
	if pl.containerd {
		pl.ctd.start(t, pl)
		pl.ctd.checkLeaks(t, pl)
	} else {
		pl.startDaemon(t)
		pl.checkLeaks(t)
	}
	pl.verifyImages(t)
	pl.ensurePodImage(t)
	if !pl.containerd {
		pl.verifyTimedOut(t)
	}
	pl.verifyStaticPods(t)
	t.Logf("verify: done in %v", time.Since(start).Round(time.Millisecond))
}

// startDaemon starts crijournal and waits until it answers; one that does not is a
// failed start, and the end of this boot's checks.
func (pl *powerLoss) startDaemon(t *testing.T) {
	t.Helper()
	d := pl.d
	start := time.Now()
	d.start(t, daemonBinary(t))
	var err error
	for deadline := time.Now().Add(readyTimeout); ; time.Sleep(200 * time.Millisecond) {
		if alive, _ := d.running(); !alive {
			err = fmt.Errorf("the daemon exited (%s)", d.lastExit())
			break
		}
		var stderr string
		if _, stderr, err = d.crictlTimeout(10*time.Second, "version"); err == nil {
			break
		}
		err = fmt.Errorf("crictl version: %v: %s", err, strings.TrimSpace(stderr))
		if time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		pl.finding(t, findFailedStart, "%v; log:\n%s", err, d.logTail(40))
		t.FailNow()
	}
	t.Logf("verify: daemon ready %v after its start", time.Since(start).Round(time.Millisecond))
}

// checkLeaks waits for recovery to converge (no record left creating, undoing or
// removing: nothing here makes an undo fail for good) and requires that crijournal
// inspect --leaks finds nothing the journal does not account for.
func (pl *powerLoss) checkLeaks(t *testing.T) {
	t.Helper()
	d := pl.d
	if err := testenv.Poll(30*time.Second, time.Second, func() error {
		for _, r := range d.liveRecords(t) {
			if r.State == journal.StateCreating || r.State == journal.StateUndoing || r.State == journal.StateRemoving {
				return fmt.Errorf("record still %s: %s", r.State, describeRecord(r))
			}
		}
		return nil
	}); err != nil {
		pl.finding(t, findHalfPresent, "recovery did not converge: %v", err)
	}
	if rep := d.inspectLeaks(t); len(rep.Leaks) > 0 {
		for _, it := range rep.Leaks {
			pl.finding(t, findLeak, "crijournal inspect --leaks: %s", it.String())
		}
	}
}

// verifyImages checks that every image whose pull was answered (and not its removal) is
// listed with the ID the pull gave, and that the data of those pulled since the last
// check reads back whole in a container.
func (pl *powerLoss) verifyImages(t *testing.T) {
	t.Helper()
	d := pl.d
	have := map[string]string{} // tag -> ID
	for _, img := range d.images(t) {
		for _, tag := range img.RepoTags {
			have[tag] = img.ID
		}
	}
	lastVerified := 0
	for _, ev := range pl.past {
		if ev.Ev == "verified" {
			lastVerified = ev.Boot
		}
	}
	for ref, ev := range pl.answeredImages() {
		id, ok := have[ref]
		switch {
		case !ok:
			pl.finding(t, findLostImage, "image %s, whose pull was answered (boot %d, ID %s), is not listed after the cut", ref, ev.Boot, ev.ID)
			continue
		case id != ev.ID:
			pl.finding(t, findLostImage, "image %s is listed with ID %s after the cut, its pull answered %s", ref, id, ev.ID)
			continue
		}
		if ev.Boot >= lastVerified && ev.Sum != "" {
			pl.requireImageData(t, ref, ev.Sum)
		}
	}
}

// ensurePodImage pulls the image of the static pods and the workload's pods, at the first
// boot (and after a cut that lost it, which verifyImages has reported).
func (pl *powerLoss) ensurePodImage(t *testing.T) {
	t.Helper()
	if _, ok := pl.answeredImages()[plPodImage]; ok {
		if _, _, err := pl.d.crictl(t, "inspecti", plPodImage); err == nil {
			return
		}
	}
	pl.d.pull(t, plPodImage)
	out := pl.d.mustCrictl(t, "inspecti", "-o", "go-template", "--template", "{{.status.id}}", plPodImage)
	pl.record(t, plEvent{Ev: evPulled, Name: plPodImage, ID: strings.TrimSpace(out)})
}

// answeredImages returns the last answered pull of each image not removed since.
func (pl *powerLoss) answeredImages() map[string]plEvent {
	out := map[string]plEvent{}
	for _, ev := range pl.past {
		switch ev.Ev {
		case evPulled:
			out[ev.Name] = ev
		case evImageRemoved:
			delete(out, ev.Name)
		}
	}
	return out
}

// requireImageData runs a container of image ref that prints the sha256 of its data file
// and requires sum.
func (pl *powerLoss) requireImageData(t *testing.T, ref, sum string) {
	t.Helper()
	d := pl.d
	pod := d.containerPod(t, "pl-check-"+randomHex(t, 4), false)
	podID := d.mustRunp(t, pod)
	defer d.removePod(t, podID)
	// busybox's applet by name: the test image links only some of them (storagetest).
	ctr := containerConfig(t, "check", 0, []string{"busybox", "sha256sum", "/data/pl"}, withImage(ref))
	id, stderr, err := d.create(t, nil, podID, ctr, pod)
	if err == nil {
		_, stderr, err = d.crictl(t, "start", id)
	}
	if err != nil {
		pl.finding(t, findLostImage, "image %s does not run after the cut: %v: %s", ref, err, stderr)
		return
	}
	// Wait for sha256sum's line; once it is there, it is the answer, right or wrong.
	var out string
	_ = testenv.Poll(20*time.Second, 200*time.Millisecond, func() error {
		out, _, _ = d.crictl(t, "logs", id)
		if strings.Contains(out, " /data/pl") {
			return nil
		}
		return errors.New("no output yet")
	})
	if !strings.Contains(out, sum) {
		err := fmt.Errorf("its data file's sha256 is not %s: %q", sum, out)
		pl.finding(t, findLostImage, "image %s after the cut: %v", ref, err)
		return
	}
	t.Logf("verify: image %s reads back whole (%s)", ref, sum[:12])
}

// verifyTimedOut deals with every creation a timed-out request left. A sandbox is
// retried as the kubelet would: if the journal still holds it cached, the retry must
// claim it under the same ID, and whatever the retry gets must be ready (not a sandbox
// whose network the reboot took). A container's pod is from before the cut, so the
// reboot made it not ready and the kubelet would make a new one rather than retry the
// container in it: the cached container must be whole (cached, not half made) or gone,
// and the pod's removal takes it along. Each is removed afterwards; what the removal
// leaves is a leak at the next check.
func (pl *powerLoss) verifyTimedOut(t *testing.T) {
	t.Helper()
	d := pl.d
	done := map[string]bool{}
	for _, ev := range pl.past {
		if ev.Ev == evRetried {
			done[ev.Name] = true
		}
	}
	live := d.liveRecords(t)
	cached := func(id string) bool {
		return slices.ContainsFunc(live, func(r journal.Record) bool { return r.ID == id && r.State == journal.StateCached })
	}
	for _, ev := range pl.past {
		if done[ev.Name] || (ev.Ev != evRunpTimeout && ev.Ev != evCreateTimeout) {
			continue
		}
		switch ev.Ev {
		case evRunpTimeout:
			wasCached := ev.ID != "" && cached(ev.ID)
			id := d.mustRunp(t, ev.Pod)
			if wasCached && id != ev.ID {
				pl.finding(t, findHalfPresent, "the retry of the timed-out sandbox %s got %s, not the cached %s", ev.Name, id, ev.ID)
			}
			d.requireState(t, id, "SANDBOX_READY")
			t.Logf("verify: timed-out sandbox %s: its retry got %s, ready (cached before: %v)", ev.Name, id, wasCached)
			d.removePod(t, id)
		case evCreateTimeout:
			for _, r := range live {
				if r.Kind == journal.KindContainer && strings.Contains(r.Name, ev.Name) && r.State != journal.StateCached && r.State != journal.StateCreated {
					pl.finding(t, findHalfPresent, "the timed-out container %s is %s after the cut: %s", ev.Name, r.State, describeRecord(r))
				}
			}
			if _, stderr, err := d.crictl(t, "stopp", ev.PodID); err != nil && !strings.Contains(stderr, "NotFound") {
				t.Errorf("crictl stopp %s: %v: %s", ev.PodID, err, stderr)
			}
			if _, stderr, err := d.crictl(t, "rmp", ev.PodID); err != nil && !strings.Contains(stderr, "NotFound") {
				t.Errorf("crictl rmp %s: %v: %s", ev.PodID, err, stderr)
			}
			t.Logf("verify: the pod %s of the timed-out container %s removed", ev.PodID, ev.Name)
		}
		pl.record(t, plEvent{Ev: evRetried, Name: ev.Name})
	}
}

// verifyStaticPods starts the kubelet and waits until every static pod whose manifest is
// on the disk runs; every manifest whose write was recorded must be there.
func (pl *powerLoss) verifyStaticPods(t *testing.T) {
	t.Helper()
	k := pl.k
	want := pl.staticPods(t)
	expected := map[string]bool{}
	for _, ev := range pl.past {
		switch ev.Ev {
		case evManifestAdd:
			expected[ev.Name] = true
		case evManifestDel:
			delete(expected, ev.Name)
		}
	}
	for name := range expected {
		if !slices.Contains(want, name) {
			pl.finding(t, findManifest, "the manifest of static pod %s, written and fsynced before the cut, is gone", name)
		}
	}
	k.start(t, requireKubelet(t))
	k.waitReady(t)
	start := time.Now()
	deadline := start.Add(testenv.Scaled(90 * time.Second))
	for _, name := range want {
		for {
			p, ok := k.pod(t, name)
			if ok && p.running() {
				t.Logf("verify: static pod %s running again %v after the kubelet", name, time.Since(start).Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				state := "not listed by the kubelet"
				if ok {
					state = p.describe()
				}
				pl.finding(t, findPodNotBack, "static pod %s not running again %v after the kubelet: %s", name, time.Since(start).Round(time.Second), state)
				break
			}
			time.Sleep(time.Second)
		}
	}
}

// staticPods lists the static pods whose manifests are in the manifest directory.
func (pl *powerLoss) staticPods(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(pl.k.manifestDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && !strings.HasPrefix(n, ".") {
			names = append(names, n)
		}
	}
	return names
}

// final ends the last boot: every static pod and image of the workload goes, the kubelet
// and the daemon stop, and nothing is left: no leak, no journal record.
func (pl *powerLoss) final(t *testing.T) {
	t.Helper()
	d, k := pl.d, pl.k
	for _, name := range pl.staticPods(t) {
		k.removeStaticPod(t, name)
		k.waitPodGone(t, name, testenv.Scaled(60*time.Second))
	}
	k.stop(t)
	for _, id := range d.pods(t) {
		d.removePod(t, id)
	}
	d.stop(t)
	d.assertNoLeaks(t)
	if recs := d.records(t); len(recs) > 0 {
		for _, r := range recs {
			t.Errorf("journal record left: %s", describeRecord(r))
		}
	}
	d.checkJournal(t)
	// conmon's state directory (its short /run form) outlives the daemon by design.
	if err := os.RemoveAll(d.ociStateDir); err != nil {
		t.Error(err)
	}
}
