package test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// CreateContainer timeouts: a creation that outlives its request is cached
// and handed to the retry, and cleaned up when no retry comes.

// TestContainerTimeouts covers a CreateContainer that times out while conmon
// is slow: the creation is kept (cached) and handed to the retry, also after
// a restart; it is cleaned up when no matching retry comes, or when its pod
// is removed; and a true duplicate of a created container gets it at once.
func TestContainerTimeouts(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, opts daemonOptions) (d *daemon, pod, podID string) {
		t.Helper()
		opts.conmonPath = conmonWrapper(t)
		d, _ = startContainerDaemon(t, opts)
		pod = d.containerPod(t, "slow", false)
		return d, pod, d.mustRunp(t, pod)
	}
	finish := func(t *testing.T, d *daemon, podID string) {
		t.Helper()
		d.removePod(t, podID)
		d.requirePs(t, "after rmp")
		d.stopClean(t)
	}

	t.Run("retry gets the same container", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		ctr := containerConfig(t, "slow", 0, sleeper)
		created := d.timeOutCreate(t, podID, ctr, pod)
		rec := d.waitCached(t, created)
		if left := time.Until(rec.Expiry); left < 30*time.Second {
			t.Errorf("the cached container expires in %v, want about the 1m TTL", left)
		}
		d.requireNotYetCreated(t, created)
		d.assertNoLeaks(t, podID, created)

		calls := d.conmonCalls(t)
		id := d.mustCreate(t, podID, ctr, pod)
		if id != created {
			t.Fatalf("the retry got container %s, want %s, the one made for the timed-out request", id, created)
		}
		if n := d.conmonCalls(t); n != calls {
			t.Errorf("the retry started conmon again (%d starts, want %d)", n, calls)
		}
		d.requirePs(t, "after the retry", id)
		d.requireWholeContainer(t, id)
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})

	t.Run("retry after a restart gets the same container", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		ctr := containerConfig(t, "slow", 0, sleeper)
		created := d.timeOutCreate(t, podID, ctr, pod)
		d.waitCached(t, created)
		d.stop(t)
		var cached []journal.Record
		for _, r := range d.records(t) {
			if r.Kind == journal.KindContainer {
				cached = append(cached, r)
			}
		}
		if len(cached) != 1 || cached[0].ID != created || cached[0].State != journal.StateCached {
			t.Fatalf("container records after the stop: %v, want one cached record %s", cached, created)
		}
		d.assertNoLeaks(t, podID, created)
		d.restart(t)
		d.requireNotYetCreated(t, created)

		id := d.mustCreate(t, podID, ctr, pod)
		if id != created {
			t.Fatalf("the retry after the restart got container %s, want %s", id, created)
		}
		d.requirePs(t, "after the retry", id)
		d.requireWholeContainer(t, id)
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})

	t.Run("retry with another attempt, as the kubelet sends it, claims the cached container", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		files := t.TempDir()
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper, asKubeletAttempt(t, files, 0)), pod)
		made := d.waitCached(t, created)
		madeAs := d.madeTerminationFile(t, made)

		// The kubelet's retry: attempt 1, log slow_1.log, restart count 1, a new
		// termination-message file; the same container otherwise.
		calls := d.conmonCalls(t)
		id := d.mustCreate(t, podID, containerConfig(t, "slow", 1, sleeper, asKubeletAttempt(t, files, 1)), pod)
		if id != created {
			t.Fatalf("the retry with attempt 1 got container %s, want %s, the one made for attempt 0", id, created)
		}
		if n := d.conmonCalls(t); n != calls {
			t.Errorf("the retry started conmon again (%d starts, want %d)", n, calls)
		}
		st := d.inspect(t, id).Status
		if st.Metadata.Attempt != 1 || st.Annotations["io.kubernetes.container.restartCount"] != "1" || filepath.Base(st.LogPath) != "slow_1.log" {
			t.Errorf("the claimed container reports attempt %d, restart count %q, log %s; want the retry's: 1, \"1\", slow_1.log",
				st.Metadata.Attempt, st.Annotations["io.kubernetes.container.restartCount"], st.LogPath)
		}
		if got := terminationHostPath(st.Annotations, st.Mounts); got != madeAs {
			t.Errorf("the claimed container reports its termination-message file at %q, want %q, the one it has mounted", got, madeAs)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(st.LogPath), "slow_0.log")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the log of attempt 0 is still there (stat: %v): it should have moved to slow_1.log", err)
		}
		d.requirePs(t, "after the retry", id)
		d.requireWholeContainer(t, id)
		if b, err := os.ReadFile(st.LogPath); err != nil || !strings.Contains(string(b), "hello-from-container") {
			t.Errorf("%s holds %q (%v), want the container's output", st.LogPath, b, err)
		}
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})

	t.Run("killed after claiming for another attempt, before the log moved: the restart moves it", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		d.waitCached(t, created)
		const point = "container-create/claimed"
		d.restartArmed(t, point)
		retry := containerConfig(t, "slow", 1, sleeper)
		if _, stderr, err := d.create(t, nil, podID, retry, pod); err == nil {
			t.Fatalf("the claim answered although the daemon was to die at %s: %s", point, stderr)
		}
		d.requireKilledAt(t, point, 10*time.Second)
		d.restartUnarmed(t)

		// The claim was committed: the retry's name holds the container, and the
		// restart moved its log where the record says.
		id := d.mustCreate(t, podID, retry, pod)
		if id != created {
			t.Fatalf("after the restart the retry got container %s, want %s", id, created)
		}
		st := d.inspect(t, id).Status
		if filepath.Base(st.LogPath) != "slow_1.log" {
			t.Fatalf("log path %s, want slow_1.log", st.LogPath)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(st.LogPath), "slow_0.log")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the log of attempt 0 is still there after the restart (stat: %v)", err)
		}
		d.requireWholeContainer(t, id)
		if b, err := os.ReadFile(st.LogPath); err != nil || !strings.Contains(string(b), "hello-from-container") {
			t.Errorf("%s holds %q (%v), want the container's output", st.LogPath, b, err)
		}
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})

	t.Run("retry with another attempt that asks for something else gets a new container, the cached one is rolled back", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		d.waitCached(t, created)

		other := []string{"sh", "-c", "echo hello-from-container; echo another; sleep 3600"}
		id := d.mustCreate(t, podID, containerConfig(t, "slow", 1, other), pod)
		if id == created {
			t.Fatalf("the retry asking for another command got the container %s made for attempt 0", id)
		}
		d.requirePs(t, "after the retry with attempt 1", id)
		d.requireWholeContainer(t, id)
		// Rolled back at once, not after the minute of its TTL.
		d.assertNoLeaks(t, podID, id)
		if recs := d.containerRecords(t); len(recs) != 1 || recs[0].ID != id {
			t.Errorf("the journal holds %d container records, want only %s", len(recs), id)
		}
		finish(t, d, podID)
	})

	t.Run("never re-requested, the cached container expires", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: shortTTL})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		d.waitCached(t, created)
		if !strings.Contains(strings.Join(d.leaks(t, podID), "\n"), "runtime container "+created) {
			t.Fatalf("the cached container %s has no runtime container", created)
		}
		d.waitNoLeaks(t, expiryWait, podID)
		if recs := d.containerRecords(t); len(recs) != 0 {
			t.Errorf("after the expiry the journal holds %d container records", len(recs))
		}
		finish(t, d, podID)
	})

	t.Run("removing the pod removes its cached container", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		d.waitCached(t, created)
		d.removePod(t, podID)
		d.requirePods(t, "after rmp")
		d.assertNoLeaks(t)
		if recs := d.containerRecords(t); len(recs) != 0 {
			t.Errorf("after rmp the journal holds %d container records", len(recs))
		}
		d.stopClean(t)
	})

	t.Run("duplicate while running waits and fails at its deadline, the next retry gets it", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		ctr := containerConfig(t, "slow", 0, sleeper)
		d.slowConmon(t, 6*time.Second)
		first := make(chan crictlResult, 1)
		go func() {
			start := time.Now()
			_, stderr, err := d.create(t, []string{"-T", "2s"}, podID, ctr, pod)
			first <- crictlResult{stderr: stderr, err: err, elapsed: time.Since(start)}
		}()
		d.waitConmonCall(t, 1, 5*time.Second)
		d.slowConmon(t, 0)
		created := d.waitContainerRecord(t, "being created", 5*time.Second, func(journal.Record) bool { return true }).ID

		// The creation is at its runtime stage: a duplicate waits for it
		// until its own deadline.
		start := time.Now()
		_, stderr, err := d.create(t, []string{"-T", "2s"}, podID, ctr, pod)
		elapsed := time.Since(start)
		r1 := <-first
		requireCode(t, "the first create -T 2s", r1.err, r1.stderr, "DeadlineExceeded")
		requireCode(t, "the duplicate create -T 2s", err, stderr, "DeadlineExceeded")
		if elapsed < 3*time.Second/2 {
			t.Errorf("the duplicate failed after %v, well before its 2s deadline: it should wait", elapsed)
		}
		t.Logf("first request failed after %v; duplicate after %v: %s", r1.elapsed.Round(time.Millisecond), elapsed.Round(time.Millisecond), strings.TrimSpace(stderr))
		if !strings.Contains(stderr, "container runtime creation") {
			t.Errorf("the duplicate's error does not name the stage the creation is at:\n%s", stderr)
		}
		d.requirePs(t, "while the creation is still running")

		d.waitCached(t, created)
		id := d.mustCreate(t, podID, ctr, pod)
		if id != created {
			t.Fatalf("the next retry got container %s, want %s", id, created)
		}
		if n := d.conmonCalls(t); n != 1 {
			t.Errorf("conmon was started %d times, want once", n)
		}
		d.requireWholeContainer(t, id)
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})

	// RemovePodSandbox waits for the container creations running in the pod,
	// so that none finishes after the removal has listed the pod's containers:
	// right after rmp nothing is listed, left on the node or in the journal.
	requireNothingAfterRmp := func(t *testing.T, d *daemon) {
		t.Helper()
		d.requirePods(t, "after rmp")
		d.requirePs(t, "after rmp")
		d.assertNoLeaks(t)
		if recs := d.containerRecords(t); len(recs) != 0 {
			t.Errorf("after rmp the journal still holds %s", describeSteps(recs[0]))
		}
		d.stopClean(t)
	}
	t.Run("removing the pod while a timed-out creation runs waits for it and leaves nothing", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{cacheTTL: time.Minute})
		created := d.timeOutCreate(t, podID, containerConfig(t, "slow", 0, sleeper), pod)
		start := time.Now()
		d.removePod(t, podID)
		t.Logf("stopp+rmp during the creation of %s took %v", created, time.Since(start).Round(time.Millisecond))
		// At once, not after the cache's minute: the creation had ended
		// (cached) before rmp returned, and rmp removed it.
		requireNothingAfterRmp(t, d)
	})

	t.Run("removing the pod while a live creation runs removes the container it returns", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{})
		d.slowConmon(t, 3*time.Second)
		result := make(chan crictlResult, 1)
		go func() {
			var r crictlResult // stdout: the container's ID
			r.stdout, r.stderr, r.err = d.create(t, []string{"-T", "20s"}, podID, containerConfig(t, "live", 0, sleeper), pod)
			result <- r
		}()
		d.waitConmonCall(t, 1, 5*time.Second)
		d.slowConmon(t, 0)
		d.mustCrictl(t, "stopp", podID)
		start := time.Now()
		d.mustCrictl(t, "rmp", podID)
		t.Logf("rmp during a live creation took %v", time.Since(start).Round(time.Millisecond))
		var id string
		select {
		case r := <-result:
			if r.err != nil {
				t.Fatalf("the live create failed: %v: %s", r.err, r.stderr)
			}
			id = r.stdout
		case <-time.After(10 * time.Second):
			t.Fatal("the live create did not return within 10s of rmp")
		}
		// The creation was answered, and rmp, which waited for it, removed
		// the container with the pod: nothing of it is left, now or later.
		_, stderr, err := d.crictl(t, "inspect", id)
		requireCode(t, "inspect of the container after its pod was removed", err, stderr, "NotFound")
		requireNothingAfterRmp(t, d)
	})

	t.Run("true duplicate of a created container returns it at once", func(t *testing.T) {
		t.Parallel()
		d, pod, podID := setup(t, daemonOptions{})
		ctr := containerConfig(t, "fast", 0, sleeper)
		id := d.mustCreate(t, podID, ctr, pod)
		calls := d.conmonCalls(t)
		for _, when := range []string{"created", "running"} {
			start := time.Now()
			again := d.mustCreate(t, podID, ctr, pod)
			if elapsed := time.Since(start); elapsed > time.Second {
				t.Errorf("the duplicate of a %s container took %v, want an answer at once", when, elapsed)
			}
			if again != id {
				t.Fatalf("the duplicate of a %s container got %s, want %s", when, again, id)
			}
			if when == "created" {
				d.requireWholeContainer(t, id)
			}
		}
		if n := d.conmonCalls(t); n != calls {
			t.Errorf("the duplicates started conmon again (%d starts, want %d)", n, calls)
		}
		d.requirePs(t, "after the duplicates", id)
		d.assertNoLeaks(t, podID, id)
		finish(t, d, podID)
	})
}

// madeTerminationFile returns the host path of the termination-message file a cached
// container was made with, from its journal record (a cached container has no status).
func (d *daemon) madeTerminationFile(t *testing.T, rec journal.Record) string {
	t.Helper()
	var obj struct {
		Config []byte `json:"config"`
	}
	if err := json.Unmarshal(rec.Object, &obj); err != nil {
		t.Fatalf("cached container %s: %v", rec.ID, err)
	}
	var cfg runtimeapi.ContainerConfig
	if err := proto.Unmarshal(obj.Config, &cfg); err != nil {
		t.Fatalf("cached container %s: config: %v", rec.ID, err)
	}
	for _, m := range cfg.GetMounts() {
		if m.GetContainerPath() == cfg.GetAnnotations()["io.kubernetes.container.terminationMessagePath"] {
			return m.GetHostPath()
		}
	}
	t.Fatalf("cached container %s has no termination-message mount", rec.ID)
	return ""
}

// terminationHostPath is the host path of the termination-message mount in a status, as
// the kubelet finds it (the mount whose container path the annotation names).
func terminationHostPath(annotations map[string]string, mounts []struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
}) string {
	for _, m := range mounts {
		if m.ContainerPath == annotations["io.kubernetes.container.terminationMessagePath"] {
			return m.HostPath
		}
	}
	return ""
}
