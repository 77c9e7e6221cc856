package upgrade

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// The state the previous daemon builds, and how the previous daemon is stopped and this
// build's started on it.

const (
	podPID = runtimeapi.NamespaceMode_POD       // shared pid namespace: a pause process
	ctrPID = runtimeapi.NamespaceMode_CONTAINER // each container's own
	// slowStep is how long a slowed CNI ADD or conmon start takes: well over the
	// requests' deadlines (crictl -T 1s gives RunPodSandbox 2s, CreateContainer -T 2s 2s).
	slowStep = 4 * time.Second
)

// upgrade is one run: the node, the binaries, and what the previous daemon made.
type upgrade struct {
	prev, cur string
	sig       syscall.Signal // how the previous daemon is stopped
	n         *node

	// containerd's scenarios.
	full                     pod    // a running, a created and an exited container; a pause process
	fullID                   string //
	running, created, exited string
	stoppedID                string // a stopped pod (its container exited with it)
	killedID                 string // a pod whose conmons are killed while no daemon runs
	alive, dead              string // in killedID: conmon killed; conmon and the container killed
	usernsID, usernsCtr      string // a pod in a user namespace, with a running container
	podsBefore               map[string]string
	ctrsBefore               map[string]ctrState
	imagesBefore             map[string][]string
	cachedPod                pod // RunPodSandbox timed out: cached
	cachedPodID              string
	cachedCtr, cachedCtrID   string // CreateContainer timed out in full: cached
	inflight                 pod    // SIGKILL only: RunPodSandbox under way when the daemon dies
	inflightID               string //
	inflightDone             chan error
	undoingID                string // a rollback whose CNI DEL keeps failing: undoing, no name
	undoDELsBefore           int    // its DEL calls before this build's daemon started
	startedCurrent           time.Time
}

// buildState starts the previous daemon and makes every scenario with it.
func (u *upgrade) buildState(t *testing.T) {
	n := u.n
	n.start(t, u.prev)

	// Images.
	for _, ref := range []string{image, otherImage} {
		if out := n.must(t, "pull", ref); !strings.Contains(out, "Image is up to date") {
			t.Fatalf("crictl pull %s printed %q", ref, out)
		}
	}

	// A pod with a running, a created and an exited container, sharing a pid namespace
	// (the previous release's pause process).
	u.full = n.podConfig(t, "full", podPID, false)
	u.fullID = n.mustID(t, "runp", u.full.path)
	u.running = n.mustID(t, "create", u.fullID, ctrConfig(t, "running", image, podPID, false, ticker...), u.full.path)
	n.must(t, "start", u.running)
	u.created = n.mustID(t, "create", u.fullID, ctrConfig(t, "created", image, podPID, false, sleeper...), u.full.path)
	u.exited = n.mustID(t, "create", u.fullID, ctrConfig(t, "exited", otherImage, podPID, false, exits3...), u.full.path)
	n.must(t, "start", u.exited)
	n.waitCtrState(t, u.exited, "CONTAINER_EXITED", 20*time.Second)
	if len(pauseProcesses(u.fullID)) != 1 {
		t.Fatalf("pod %s has pause processes %v, want one", u.fullID, pauseProcesses(u.fullID))
	}

	// A stopped pod.
	stopped := n.podConfig(t, "stopped", ctrPID, false)
	u.stoppedID = n.mustID(t, "runp", stopped.path)
	c := n.mustID(t, "create", u.stoppedID, ctrConfig(t, "stopped-ctr", image, ctrPID, false, sleeper...), stopped.path)
	n.must(t, "start", c)
	n.must(t, "stopp", u.stoppedID)

	// A pod whose conmons are killed while no daemon runs (the analogue of containerd's
	// killed shim): one container keeps running, the other is killed with its conmon.
	killed := n.podConfig(t, "conmon-killed", ctrPID, false)
	u.killedID = n.mustID(t, "runp", killed.path)
	u.alive = n.mustID(t, "create", u.killedID, ctrConfig(t, "alive", image, ctrPID, false, sleeper...), killed.path)
	n.must(t, "start", u.alive)
	u.dead = n.mustID(t, "create", u.killedID, ctrConfig(t, "dead", image, ctrPID, false, sleeper...), killed.path)
	n.must(t, "start", u.dead)

	// A pod in a user namespace.
	userns := n.podConfig(t, "userns", ctrPID, true)
	u.usernsID = n.mustID(t, "runp", userns.path)
	u.usernsCtr = n.mustID(t, "create", u.usernsID, ctrConfig(t, "userns-ctr", image, ctrPID, true, sleeper...), userns.path)
	n.must(t, "start", u.usernsCtr)
	requireUIDMap(t, n, u.usernsCtr)

	u.makeCachedPod(t)
	u.makeCachedContainer(t)
	u.makeFailingUndo(t)

	for _, id := range []string{u.running, u.alive, u.dead, u.usernsCtr} {
		n.waitCtrState(t, id, "CONTAINER_RUNNING", 20*time.Second)
	}
	u.podsBefore = n.podStates(t)
	u.ctrsBefore = n.ctrStates(t)
	u.imagesBefore = n.images(t)
	if len(u.podsBefore) != 4 || len(u.ctrsBefore) != 7 || len(u.imagesBefore) != 2 {
		t.Fatalf("the previous daemon lists %d pods, %d containers, %d images; want 4, 7, 2:\n%v\n%v\n%v",
			len(u.podsBefore), len(u.ctrsBefore), len(u.imagesBefore), u.podsBefore, u.ctrsBefore, u.imagesBefore)
	}
	t.Logf("before the upgrade: pods %v, containers %v, images %v", u.podsBefore, u.ctrsBefore, u.imagesBefore)

	if u.sig == syscall.SIGKILL {
		u.startInflight(t)
	}
}

// requireUIDMap fails the test unless the container runs in the user namespace its pod
// asked for.
func requireUIDMap(t *testing.T, n *node, id string) {
	t.Helper()
	if m := strings.Fields(n.execSync(t, id, "cat", "/proc/self/uid_map")); len(m) != 3 || m[0] != "0" || m[1] != "200000" || m[2] != "65536" {
		t.Fatalf("uid_map of %s: %q, want 0 200000 65536", id, m)
	}
}

// makeCachedPod makes a RunPodSandbox time out during a slow CNI ADD (crictl runp -T 1s)
// and waits until the daemon has cached the sandbox it went on creating.
func (u *upgrade) makeCachedPod(t *testing.T) {
	n := u.n
	u.cachedPod = n.podConfig(t, "cached-pod", ctrPID, false)
	n.fault(t, u.cachedPod.name, "sleep-ADD", true, strconv.Itoa(int(slowStep.Seconds())))
	_, stderr, err := n.crictl(t, "runp", "-T", "1s", u.cachedPod.path)
	requireCode(t, "crictl runp -T 1s with a slow CNI ADD", err, stderr, "DeadlineExceeded")
	n.fault(t, u.cachedPod.name, "sleep-ADD", false, "")
	adds := n.cniCalls(t, "ADD", u.cachedPod.name)
	if len(adds) != 1 {
		t.Fatalf("CNI ADD calls of the timed-out pod: %v, want one", adds)
	}
	u.cachedPodID = adds[0]
	u.waitRecord(t, u.prev, u.cachedPodID, "cached", func(r journal.Record) bool { return r.State == journal.StateCached })
}

// makeCachedContainer makes a CreateContainer in the full pod time out during a slow
// conmon start (crictl create -T 2s) and waits until its container is cached.
func (u *upgrade) makeCachedContainer(t *testing.T) {
	n := u.n
	known := map[string]bool{}
	for _, r := range n.records(t, u.prev) {
		known[r.ID] = true
	}
	u.cachedCtr = ctrConfig(t, "cached-ctr", image, podPID, false, sleeper...)
	starts := n.conmonStarts(t)
	n.slowConmon(t, slowStep)
	_, stderr, err := n.crictl(t, "create", "-T", "2s", u.fullID, u.cachedCtr, u.full.path)
	requireCode(t, "crictl create -T 2s with a slow conmon", err, stderr, "DeadlineExceeded")
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, testenv.Until("conmon's start for the timed-out creation", func() bool {
		return n.conmonStarts(t) > starts
	}))
	n.slowConmon(t, 0)
	for _, r := range n.records(t, u.prev) {
		if r.Kind == journal.KindContainer && !known[r.ID] {
			u.cachedCtrID = r.ID
		}
	}
	if u.cachedCtrID == "" {
		t.Fatal("no journal record of the timed-out container creation")
	}
	u.waitRecord(t, u.prev, u.cachedCtrID, "cached", func(r journal.Record) bool { return r.State == journal.StateCached })
}

// makeFailingUndo makes a RunPodSandbox fail after CNI ADD allocated an address, while
// every CNI DEL of that pod fails: its rollback is left undoing, without the name.
func (u *upgrade) makeFailingUndo(t *testing.T) {
	n := u.n
	p := n.podConfig(t, "undo-fails", ctrPID, false)
	n.fault(t, p.name, "fail-late-ADD", true, "")
	n.fault(t, p.name, "fail-DEL", true, "")
	_, stderr, err := n.crictl(t, "runp", p.path)
	if err == nil || !strings.Contains(stderr, "injected failure after the ADD allocated") {
		t.Fatalf("crictl runp with a late CNI ADD failure: %v, want that failure\nstderr: %s", err, stderr)
	}
	n.fault(t, p.name, "fail-late-ADD", false, "")
	adds := n.cniCalls(t, "ADD", p.name)
	if len(adds) != 1 {
		t.Fatalf("CNI ADD calls of the failing pod: %v, want one", adds)
	}
	u.undoingID = adds[0]
	u.waitRecord(t, u.prev, u.undoingID, "undoing without the name, its undo failed", isFailingUndo)
}

func isFailingUndo(r journal.Record) bool {
	return r.State == journal.StateUndoing && !r.HoldsName && len(r.FailedUndos()) > 0
}

// startInflight starts a RunPodSandbox whose CNI ADD sleeps a minute, and waits until
// the ADD has begun: the previous daemon is killed in the middle of it.
func (u *upgrade) startInflight(t *testing.T) {
	n := u.n
	u.inflight = n.podConfig(t, "in-flight", ctrPID, false)
	n.fault(t, u.inflight.name, "sleep-ADD", true, "60")
	u.inflightDone = make(chan error, 1)
	go func() {
		_, stderr, err := n.crictlWithin(90*time.Second, "runp", u.inflight.path)
		if err != nil {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr))
		}
		u.inflightDone <- err
	}()
	testenv.Eventually(t, 20*time.Second, 50*time.Millisecond, testenv.Until("the in-flight pod's CNI ADD", func() bool {
		return len(n.cniCalls(t, "ADD", u.inflight.name)) == 1
	}))
	u.inflightID = n.cniCalls(t, "ADD", u.inflight.name)[0]
	u.waitRecord(t, u.prev, u.inflightID, "creating", func(r journal.Record) bool { return r.State == journal.StateCreating })
}

// waitRecord waits until bin's inspect shows a record of id for which ok holds.
func (u *upgrade) waitRecord(t *testing.T, bin, id, what string, ok func(journal.Record) bool) journal.Record {
	t.Helper()
	var r journal.Record
	testenv.Eventually(t, 20*time.Second, 100*time.Millisecond, func() error {
		var found bool
		r, found = u.n.record(t, bin, id)
		if found && ok(r) {
			return nil
		}
		return fmt.Errorf("record of %s not %s within 20s (found %v: %s)", id, what, found, describe(r))
	})
	return r
}

func describe(r journal.Record) string {
	b, _ := json.Marshal(struct {
		Kind, Name, State string
		HoldsName         bool
		FailedUndos       int
	}{string(r.Kind), r.Name, string(r.State), r.HoldsName, len(r.FailedUndos())})
	return string(b)
}

// stopPrevious stops the previous daemon with the run's signal, then kills the conmons
// of the conmon-killed pod (and one container with its conmon) while no daemon runs.
func (u *upgrade) stopPrevious(t *testing.T) {
	n := u.n
	n.stop(t, u.sig)
	if u.inflightDone != nil {
		select {
		case err := <-u.inflightDone:
			if err == nil {
				t.Fatalf("the in-flight RunPodSandbox succeeded although its daemon was killed")
			}
			t.Logf("the in-flight RunPodSandbox failed with its daemon: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the in-flight crictl runp still waits 30s after its daemon was killed")
		}
		n.fault(t, u.inflight.name, "sleep-ADD", false, "")
	}
	state := n.layout.ConmonState("runc")
	for _, id := range []string{u.alive, u.dead} {
		pid := readPid(t, state.Container(id)+"/conmon.pid")
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatalf("kill conmon %d of %s: %v", pid, id, err)
		}
		testenv.WaitGone(t, pid, 10*time.Second)
	}
	init := initPid(t, n, u.dead)
	if err := syscall.Kill(init, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the init %d of %s: %v", init, u.dead, err)
	}
	testenv.WaitGone(t, init, 10*time.Second)
	u.undoDELsBefore = len(n.cniCalls(t, "DEL", "undo-fails"))
}

// startCurrent reads the previous daemon's journal with this build while no daemon runs
// (the file, read-only), then starts this build's daemon on the node.
func (u *upgrade) startCurrent(t *testing.T) {
	n := u.n
	recs := n.records(t, u.cur)
	for _, id := range []string{u.fullID, u.running, u.cachedPodID, u.cachedCtrID, u.undoingID} {
		if !slices.ContainsFunc(recs, func(r journal.Record) bool { return r.ID == id }) {
			t.Errorf("this build's inspect --json does not read the previous journal's record of %s", id)
		}
	}
	u.startedCurrent = time.Now()
	n.start(t, u.cur)
}

// readPid reads a pid file.
func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %q", path, b)
	}
	return pid
}

// initPid returns the host PID of a container's init, from runc.
func initPid(t *testing.T, n *node, id string) int {
	t.Helper()
	out, err := exec.Command(runcPath(), "--root", n.layout.RuntimeRoot("runc"), "state", id).Output()
	if err != nil {
		t.Fatalf("runc state %s: %v", id, err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("runc state %s: %v: %s", id, err, out)
	}
	return st.Pid
}
