package test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// inProgressStage is the stage the daemon names when a duplicate request
// gives up while the creation is setting up the network (server's
// stageSandboxNetwork).
const inProgressStage = "sandbox network creation"

// readyForRetry is in the daemon's error to a duplicate that waited while
// the creation finished after its own request's deadline.
const readyForRetry = "will be returned on the next retry"

// TestTimeouts covers a RunPodSandbox that times out while the network is
// slow: the creation is kept (cached) and handed to the retry, cleaned up
// when no matching retry comes, and duplicates wait instead of failing at
// once.
func TestTimeouts(t *testing.T) {
	t.Parallel()

	t.Run("retry gets the same sandbox", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{cacheTTL: shortTTL})
		pod := podConfig(t, "slow", "e2e", randomHex(t, 16), 0, false)
		created := d.timeOut(t, pod)

		d.waitNetworkDone(t, created, 2*slowADD)
		d.requirePods(t, "after the timed-out creation finished (cached: hidden)")
		if !isNamespace(d.netnsPin(created)) || len(d.ipamAllocations(t)) == 0 {
			t.Fatalf("the timed-out creation %s was not kept: namespace pinned %v, IP allocations %v",
				created, isNamespace(d.netnsPin(created)), d.ipamAllocations(t))
		}
		_, stderr, err := d.crictl(t, "inspectp", created)
		requireCode(t, "inspectp of a cached sandbox", err, stderr, "NotFound")
		// Stop and remove are refused too (straight to the socket: crictl
		// asks for the status first), and change nothing.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cri := d.cri(t)
		for call, err := range map[string]error{
			"StopPodSandbox": func() error {
				_, err := cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: created})
				return err
			}(),
			"RemovePodSandbox": func() error {
				_, err := cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: created})
				return err
			}(),
		} {
			if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "not yet created") {
				t.Errorf("%s of a cached sandbox = %v, want NotFound saying it is not yet created", call, err)
			}
		}

		d.requireRetryGetsCached(t, pod, created, "the retry")
	})

	t.Run("retry with another attempt claims the cached sandbox", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{cacheTTL: time.Minute})
		uid := randomHex(t, 16)
		created := d.timeOut(t, podConfig(t, "slow", "e2e", uid, 0, false))
		d.waitNetworkDone(t, created, 2*slowADD)

		adds := len(d.addedIDs(t))
		id := d.mustRunp(t, podConfig(t, "slow", "e2e", uid, 1, false))
		if id != created {
			t.Fatalf("the retry with attempt 1 got sandbox %s, want %s, the one made for attempt 0", id, created)
		}
		if n := len(d.addedIDs(t)); n != adds {
			t.Errorf("the retry ran CNI ADD again (%d ADDs, want %d)", n, adds)
		}
		if m := d.inspectp(t, id).Status.Metadata; m.Attempt != 1 {
			t.Errorf("the claimed sandbox reports attempt %d, want the retry's 1", m.Attempt)
		}
		d.requirePods(t, "after the retry with attempt 1", id)
		d.requireState(t, id, "SANDBOX_READY")
		d.assertNoLeaks(t, id)

		d.removePod(t, id)
		d.stopClean(t)
	})

	t.Run("retry with another attempt that asks for something else gets a new sandbox, the cached one is rolled back", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{cacheTTL: time.Minute})
		uid := randomHex(t, 16)
		created := d.timeOut(t, podConfig(t, "slow", "e2e", uid, 0, false))
		d.waitNetworkDone(t, created, 2*slowADD)

		other := writePodJSON(t, "pod-other", map[string]any{
			"metadata": map[string]any{"name": "slow", "namespace": "e2e", "uid": uid, "attempt": 1},
			"hostname": "another-host",
		})
		id := d.mustRunp(t, other)
		if id == created {
			t.Fatalf("the retry asking for another hostname got the sandbox %s made for attempt 0", id)
		}
		d.requirePods(t, "after the retry with attempt 1", id)
		d.requireState(t, id, "SANDBOX_READY")
		// Rolled back at once, not after the minute of its TTL.
		d.assertNoLeaks(t, id)

		d.removePod(t, id)
		d.stopClean(t)
	})

	t.Run("a different request under the cached name is refused and frees the name", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{cacheTTL: time.Minute})
		uid := randomHex(t, 16)
		created := d.timeOut(t, podConfig(t, "slow", "e2e", uid, 0, false))
		d.waitNetworkDone(t, created, 2*slowADD)

		// Same name (name, namespace, uid, attempt), different configuration.
		other := writePodJSON(t, "pod-other", map[string]any{
			"metadata": map[string]any{"name": "slow", "namespace": "e2e", "uid": uid, "attempt": 0},
			"hostname": "another-host",
		})
		_, stderr, err := d.runp(t, other)
		requireCode(t, "runp of a different request under a cached sandbox's name", err, stderr, "AlreadyExists")
		if !strings.Contains(stderr, created) || !strings.Contains(stderr, "rolled back") {
			t.Errorf("the error does not name the cached sandbox %s and say it was rolled back:\n%s", created, stderr)
		}
		// The cached sandbox is gone at once, not after the minute of its TTL.
		d.assertNoLeaks(t)
		id := d.mustRunp(t, other)
		if id == created {
			t.Fatalf("the different request got the cached sandbox %s", id)
		}
		d.requireState(t, id, "SANDBOX_READY")
		d.removePod(t, id)
		d.stopClean(t)
	})

	t.Run("never re-requested, the cached sandbox expires", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{cacheTTL: shortTTL})
		created := d.timeOut(t, podConfig(t, "slow", "e2e", randomHex(t, 16), 0, false))
		d.waitNetworkDone(t, created, 2*slowADD)
		if !isNamespace(d.netnsPin(created)) {
			t.Fatalf("the timed-out creation %s was not kept for a retry: its namespace is gone at once", created)
		}
		d.waitNoLeaks(t, expiryWait)
		d.requirePods(t, "after the cached sandbox expired")

		d.stopClean(t)
	})

	t.Run("duplicate while running waits and fails at its deadline, the next retry gets it", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{cacheTTL: shortTTL})
		pod := podConfig(t, "slow", "e2e", randomHex(t, 16), 0, false)
		d.slowCNI(t, slowADD)
		first := d.runpBackground(t, "-T", "1s", pod)
		created := d.waitADD(t, 1, 5*time.Second)
		d.slowCNI(t, 0)

		// The creation is at its network stage: a duplicate waits for it
		// until its own deadline.
		start := time.Now()
		_, stderr, err := d.runp(t, "-T", "1s", pod)
		elapsed := time.Since(start)
		r1 := <-first
		requireCode(t, "the first runp -T 1s", r1.err, r1.stderr, "DeadlineExceeded")
		if err == nil {
			t.Fatal("the duplicate runp got a sandbox while the creation was still running")
		}
		if elapsed < r1.elapsed*3/4 {
			t.Errorf("the duplicate failed after %v, well before its deadline (the first request's ran %v): it should wait", elapsed, r1.elapsed)
		}
		if _, serr := os.Stat(d.cniResultPath(created)); serr == nil {
			t.Fatalf("CNI ADD of %s finished before the duplicate's deadline; the test's timing is off", created)
		}
		t.Logf("first request failed after %v; duplicate after %v: %s", r1.elapsed.Round(time.Millisecond), elapsed.Round(time.Millisecond), strings.TrimSpace(stderr))
		if !strings.Contains(stderr, inProgressStage) {
			t.Errorf("the duplicate's error does not name the stage the creation is at (%q):\n%s", inProgressStage, stderr)
		}
		d.requirePods(t, "while the creation is still running")

		d.waitNetworkDone(t, created, 2*slowADD)
		id := d.mustRunp(t, pod)
		if id != created {
			t.Fatalf("the next retry got sandbox %s, want %s", id, created)
		}
		d.requirePods(t, "after the retry", id)
		d.requireState(t, id, "SANDBOX_READY")
		if adds := d.addedIDs(t); !slices.Equal(adds, []string{id}) {
			t.Errorf("CNI ADD calls %v, want only the one of %s", adds, id)
		}
		d.assertNoLeaks(t, id)

		d.removePod(t, id)
		d.stopClean(t)
	})

	t.Run("duplicate waiting when the creation finishes fails, the next retry gets it", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{cacheTTL: shortTTL})
		pod := podConfig(t, "slow", "e2e", randomHex(t, 16), 0, false)
		d.slowCNI(t, 3*time.Second)
		first := d.runpBackground(t, "-T", "1s", pod)
		created := d.waitADD(t, 1, 5*time.Second)
		d.slowCNI(t, 0)

		// -T 3s: a deadline of about 6 s, after the network is done (3 s).
		start := time.Now()
		stdout, stderr, err := d.crictl(t, "runp", "-T", "3s", pod)
		elapsed := time.Since(start)
		r1 := <-first
		requireCode(t, "the first runp -T 1s", r1.err, r1.stderr, "DeadlineExceeded")
		if _, serr := os.Stat(d.cniResultPath(created)); serr != nil {
			t.Fatalf("CNI ADD of %s had not finished when the duplicate returned after %v; the test's timing is off", created, elapsed)
		}
		// The duplicate must not be handed the sandbox: its client may have
		// given up already. It fails; the next retry gets it.
		if err == nil {
			t.Fatalf("the duplicate that waited while the creation finished got a sandbox (%s); want an error, the next retry gets it", strings.TrimSpace(stdout))
		}
		t.Logf("duplicate failed after %v: %s", elapsed.Round(time.Millisecond), strings.TrimSpace(stderr))
		if !strings.Contains(stderr, readyForRetry) {
			t.Errorf("the duplicate's error does not say the sandbox is ready for the next retry (%q):\n%s", readyForRetry, stderr)
		}
		d.requirePods(t, "after the duplicate failed")

		id := d.mustRunp(t, pod)
		if id != created {
			t.Fatalf("the next retry got sandbox %s, want %s", id, created)
		}
		d.requirePods(t, "after the retry", id)
		d.assertNoLeaks(t, id)

		d.removePod(t, id)
		d.stopClean(t)
	})

	t.Run("true duplicate of a created sandbox returns it at once", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, daemonOptions{cacheTTL: shortTTL})
		pod := podConfig(t, "fast", "e2e", randomHex(t, 16), 0, false)
		id := d.mustRunp(t, pod)
		start := time.Now()
		again := d.mustRunp(t, pod)
		if elapsed := time.Since(start); elapsed > time.Second {
			t.Errorf("the duplicate of a created sandbox took %v, want an answer at once", elapsed)
		}
		if again != id {
			t.Fatalf("the duplicate got sandbox %s, want %s", again, id)
		}
		d.requirePods(t, "after the duplicate", id)
		if adds := d.addedIDs(t); !slices.Equal(adds, []string{id}) {
			t.Errorf("CNI ADD calls %v, want only the one of %s", adds, id)
		}
		d.assertNoLeaks(t, id)

		d.removePod(t, id)
		d.stopClean(t)
	})
}

// cachedThenStopped starts a daemon with the cache TTL, times a
// RunPodSandbox out, lets the creation finish (cached), and stops the daemon.
// It checks that the journal holds just that cached record and that the node
// holds just its sandbox, and returns them.
func cachedThenStopped(t *testing.T, ttl time.Duration) (d *daemon, pod, created string, cached journal.Record) {
	t.Helper()
	d = startDaemon(t, daemonOptions{cacheTTL: ttl})
	pod = podConfig(t, "slow", "e2e", randomHex(t, 16), 0, false)
	created = d.timeOut(t, pod)
	d.waitNetworkDone(t, created, 2*slowADD)
	d.stop(t)
	recs := d.records(t)
	if len(recs) != 1 || recs[0].ID != created || recs[0].State != journal.StateCached {
		var got []string
		for _, r := range recs {
			got = append(got, describeRecord(r))
		}
		t.Fatalf("journal after the stop: %q, want one cached record %s", got, created)
	}
	d.assertNoLeaks(t, created)
	return d, pod, created, recs[0]
}

// TestCacheSurvivesRestart times a RunPodSandbox out, lets the creation
// finish, restarts the daemon, and retries: the retry gets the same sandbox.
func TestCacheSurvivesRestart(t *testing.T) {
	t.Parallel()
	d, pod, created, cached := cachedThenStopped(t, 30*time.Second)
	if left := time.Until(cached.Expiry); left < 10*time.Second {
		t.Errorf("the cached record expires in %v, want about the 30s TTL", left)
	}
	d.checkJournal(t)

	d.restart(t)
	d.requirePods(t, "after the restart (cached: hidden)")
	d.requireRetryGetsCached(t, pod, created, "the retry after the restart")
}

// TestCacheExpiresWhileDown: a cached sandbox whose expiry passes while the
// daemon is down is rolled back by recovery at the next start, before the
// socket is served: nothing of it is left when the daemon first answers, and
// the retry gets a new sandbox.
func TestCacheExpiresWhileDown(t *testing.T) {
	t.Parallel()
	d, pod, created, cached := cachedThenStopped(t, 8*time.Second)
	time.Sleep(time.Until(cached.Expiry) + 100*time.Millisecond)

	d.restart(t)
	d.assertNoLeaks(t)
	if recs := d.liveRecords(t); len(recs) != 0 {
		t.Errorf("after the restart the journal still holds %s", describeSteps(recs[0]))
	}
	if !strings.Contains(d.logOfStart(2), "cached record expired, rolling back") {
		t.Errorf("recovery did not log the expiry of %s:\n%s", created, d.logOfStart(2))
	}
	id := d.mustRunp(t, pod)
	if id == created {
		t.Fatalf("the retry got the expired sandbox %s", id)
	}
	d.removePod(t, id)
	d.stopClean(t)
}
