package test

import "testing"

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
