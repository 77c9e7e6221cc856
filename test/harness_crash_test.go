package test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The crash matrix's vocabulary, shared by the flows' triggers: what a crashed
// request may leave (crashOutcome) and how a flow is driven to a failure point
// (crashTrigger).

// crashOutcome is what a crashed request left, as the next start shows it.
type crashOutcome string

// crashTrigger is how a flow is driven to one of its failure points, and how
// what the crash left is judged after the restart. A new flow (containers)
// adds its own triggers and table rows.
type crashTrigger struct {
	// how describes the request for the logs.
	how string
	// variant tells apart triggers that reach the same point another way
	// ("" for the main one); it suffixes the subtest's name.
	variant string
	// provoke makes the request that must reach the armed point and kill
	// the daemon. It returns the ID of the resource when it knows it.
	provoke func(t *testing.T, d *daemon, pod string) (knownID string)
	// reset undoes test-side conditions of provoke before the restart (a
	// failing CNI plugin, say); nil when there are none.
	reset func(t *testing.T, d *daemon)
	// settle checks the invariant after the restart, retries the request,
	// removes what the retry got, and returns the outcome. crashed is the
	// ID of the resource whose request crashed ("" if it never had one).
	settle func(t *testing.T, d *daemon, pod, crashed string) crashOutcome
	// allowed lists the outcomes that are correct for this trigger.
	allowed []crashOutcome
	// alsoArm arms more failure points (failpoint syntax) beside the crash
	// point: an injected error that sends the request down the path of the
	// crash point, say. "" when none.
	alsoArm string
	// containers: the flow is a container's. The daemon pulls the test
	// image from a loopback registry and starts conmon through the tests'
	// wrapper (conmonWrapper), the pod is a containerPod, and only
	// container records are checked at the crash (the pod's is created).
	containers bool
	// pod writes the pod configuration of the flow; nil for podConfig's (or
	// containerPod's, with containers).
	pod func(t *testing.T, d *daemon) string
}

const (
	// outcomeGone: nothing is listed and nothing is left on the node; the
	// retry makes a new resource.
	outcomeGone crashOutcome = "gone"
	// outcomeCached: nothing is listed, but the finished work is kept
	// (hidden) and the retry gets it without redoing it.
	outcomeCached crashOutcome = "cached-and-returned"
	// outcomeCreated: the resource is listed, whole, and the retry gets the
	// same ID (a true duplicate).
	outcomeCreated crashOutcome = "created-and-returned"
)

// removeCrashingContainerWith pulls the test image, runs the pod, runs the
// container of config(t, pod) in it and removes it (crictl rm refuses a
// running container without -f, and -f stops it first, so the RPC is called
// directly); the daemon crashes at the armed point on the way, or right
// after the answer (see below). It returns the container's ID.
func removeCrashingContainerWith(t *testing.T, d *daemon, pod string, config func(*testing.T, string) string) string {
	t.Helper()
	d.pull(t, testImage)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, config(t, pod), pod)
	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// At the undos a removal leaves to the journal's Maintain (the root filesystem's
	// and what was made before it: journal.Remove), the crash comes after the answer,
	// or while it is on its way: RemoveContainer may succeed. The caller requires the
	// crash at the armed point (requireKilledAt) either way.
	_, err := d.cri(t).RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
	t.Logf("RemoveContainer of %s: %v", id, err)
	return id
}

// createCrashingContainer pulls the test image, runs the pod and creates a
// container in it, a request that must not succeed: the daemon crashes at
// the armed point on the way.
func createCrashingContainer(t *testing.T, d *daemon, pod string) string {
	t.Helper()
	return createCrashingContainerWith(t, d, pod, crashContainerConfig)
}

// createCrashingContainerWith is createCrashingContainer for the container
// of config(t, pod).
func createCrashingContainerWith(t *testing.T, d *daemon, pod string, config func(*testing.T, string) string) string {
	t.Helper()
	d.pull(t, testImage)
	podID := d.mustRunp(t, pod)
	if id, _, err := d.create(t, nil, podID, config(t, pod), pod); err == nil {
		t.Fatalf("crictl create returned container %s: the daemon did not crash at the armed point (a misspelt point name?)", id)
	}
	return ""
}

// crashContainerConfig writes (the same every time) and returns the
// container configuration of a crash case, kept beside its pod's.
func crashContainerConfig(t *testing.T, pod string) string {
	t.Helper()
	return writeCrashContainerConfig(t, pod, "ctr-crash.json",
		map[string]any{"pid": int(runtimeapi.NamespaceMode_CONTAINER)})
}

// writeCrashContainerConfig writes the crash case's container configuration with the
// given namespace options to name beside the pod's configuration, and returns its path.
func writeCrashContainerConfig(t *testing.T, pod, name string, namespaces map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{
		"metadata": map[string]any{"name": "crash", "attempt": 0},
		"image":    map[string]any{"image": testImage},
		"command":  sleeper,
		"log_path": "crash_0.log",
		"linux":    map[string]any{"security_context": map[string]any{"namespace_options": namespaces}},
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(pod), name)
	writeFile(t, path, string(b), 0o644)
	return path
}

// settleContainer checks the invariant for a container whose request crashed
// (crashed is its ID when known), after the restart: the pod is ready, and
// either no container is listed and nothing of one is left (gone), or none
// is listed and what is left is handed whole to the retry (cached), or the
// container is listed whole and the retry gets the same ID (created). Then
// it runs the container the retry got, removes it and the pod, and checks
// the node is clean.
func settleContainer(t *testing.T, d *daemon, pod, crashed string) crashOutcome {
	t.Helper()
	return settleContainerWith(t, d, pod, crashed, crashContainerConfig)
}

// settleContainerWith is settleContainer for the container of config(t, pod).
func settleContainerWith(t *testing.T, d *daemon, pod, crashed string, config func(*testing.T, string) string) crashOutcome {
	t.Helper()
	pods := d.pods(t)
	if len(pods) != 1 {
		t.Fatalf("after the restart crictl pods lists %v, want the one pod", pods)
	}
	podID := pods[0]
	d.requireWholeSandbox(t, podID)
	ctr := config(t, pod)
	listed := d.ps(t, true)
	left := d.leaks(t, podID) // the daemon runs: no journal part
	calls := d.conmonCalls(t)
	var out crashOutcome
	var id string
	switch {
	case len(listed) == 0 && len(left) == 0:
		out = outcomeGone
		id = d.mustCreate(t, podID, ctr, pod)
		if id == crashed {
			t.Fatalf("nothing of %s was left after the restart, yet the retry got it back", crashed)
		}
		if n := d.conmonCalls(t); n != calls+1 {
			t.Fatalf("the retry got a new container %s but conmon was started %d times, want once", id, n-calls)
		}
	case len(listed) == 0:
		out = outcomeCached
		t.Logf("after the restart nothing is listed; the node holds:\n  %s", strings.Join(left, "\n  "))
		id = d.mustCreate(t, podID, ctr, pod)
		if crashed != "" && id != crashed {
			t.Fatalf("after the restart nothing is listed but the node holds what %s made; the retry got a new container %s instead: the kept work is orphaned (neither gone nor returned)", crashed, id)
		}
		if n := d.conmonCalls(t); n != calls {
			t.Fatalf("the retry got the kept container %s but conmon was started again", id)
		}
		if !strings.Contains(strings.Join(left, "\n"), "runtime container "+id) {
			t.Fatalf("the retry got %s, which the node held no runtime container of:\n  %s", id, strings.Join(left, "\n  "))
		}
	case len(listed) == 1:
		out = outcomeCreated
		id = listed[0]
		if crashed != "" && id != crashed {
			t.Fatalf("after the restart crictl ps -a lists %s, want the crashed request's %s", id, crashed)
		}
		again := d.mustCreate(t, podID, ctr, pod)
		if again != id {
			t.Fatalf("the retry of a created container %s got %s, want the same ID (a true duplicate)", id, again)
		}
		if n := d.conmonCalls(t); n != calls {
			t.Fatalf("the retry of the created container %s started conmon again", id)
		}
	default:
		t.Fatalf("after the restart crictl ps -a lists %v: more than the one container requested", listed)
	}
	d.requirePs(t, "after the retry", id)
	d.requireWholeContainer(t, id)
	d.assertNoLeaks(t, podID, id)

	d.removeCtr(t, id)
	d.requirePs(t, "after stop and rm")
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.requirePods(t, "after stopp and rmp")
	d.assertNoLeaks(t)
	return out
}
