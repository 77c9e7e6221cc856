package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Pod sandboxes and crashes: the sandbox flows' triggers of the crash matrix
// (crash_matrix_test.go), the daemon killed during a slow CNI ADD, and stopped
// (SIGTERM) during a slow creation.

// Triggers of the pod sandbox flows (pod network: host network skips the
// network points).
var (
	// createSandboxTrigger: RunPodSandbox of a new pod. A creation may be
	// rolled back, cached for the retry, or created (if the crash came
	// after the record was answered).
	createSandboxTrigger = &crashTrigger{
		how: "crictl runp of a new pod",
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			if id, _, err := d.runp(t, pod); err == nil {
				t.Fatalf("crictl runp returned sandbox %s: the daemon did not crash at the armed point (a misspelt point name?)", id)
			}
			return ""
		},
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeGone, outcomeCached, outcomeCreated},
	}

	// timedOutSandboxTrigger: RunPodSandbox whose request times out
	// (crictl runp -T 1s) during a slow CNI ADD; the daemon goes on, so the
	// creation finishes after the deadline and is answered "cached". A crash
	// then must not lose it: the retry gets it, after the restart.
	timedOutSandboxTrigger = &crashTrigger{
		how:     "crictl runp -T 1s of a new pod while CNI ADD takes 3s",
		variant: "timed out",
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			d.slowCNI(t, 3*time.Second)
			_, stderr, err := d.runp(t, "-T", "1s", pod)
			requireCode(t, "crictl runp -T 1s with a slow network", err, stderr, "DeadlineExceeded")
			id := d.waitADD(t, 1, 5*time.Second)
			d.slowCNI(t, 0)
			return id
		},
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeCached},
	}

	// removeSandboxTrigger: RemovePodSandbox of a created, ready sandbox
	// (not stopped: the network is still attached, so the removal undoes
	// both steps). crictl rmp refuses a ready sandbox without -f, and -f
	// stops it first, so the RPC is called directly. After the restart the
	// removal must have been finished.
	removeSandboxTrigger = &crashTrigger{
		how: "crictl runp, then RemovePodSandbox of the ready sandbox",
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			id := d.mustRunp(t, pod)
			d.requireState(t, id, "SANDBOX_READY")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := d.cri(t).RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err == nil {
				t.Fatalf("RemovePodSandbox of %s succeeded: the daemon did not crash at the armed point (a misspelt point name?)", id)
			} else {
				t.Logf("RemovePodSandbox of %s: %v (the daemon crashed)", id, err)
			}
			return id
		},
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeGone},
	}

	// rollbackAnsweredSandboxTrigger: RunPodSandbox whose answer fails
	// (sandbox-create/before-answer=error) after every step, the last one
	// NRI's, so that the rollback undoes them all and the crash hits it.
	rollbackAnsweredSandboxTrigger = &crashTrigger{
		how:     "crictl runp whose answer fails (sandbox-create/before-answer=error)",
		variant: "every step",
		alsoArm: "sandbox-create/before-answer=error",
		provoke: func(t *testing.T, d *daemon, pod string) string { return createSandboxTrigger.provoke(t, d, pod) },
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeGone},
	}

	// rollbackSandboxTrigger: RunPodSandbox while CNI ADD fails, so the
	// creation is rolled back at once and the crash hits the rollback. A
	// failed creation can only end gone.
	rollbackSandboxTrigger = &crashTrigger{
		how: "crictl runp while CNI ADD fails",
		provoke: func(t *testing.T, d *daemon, pod string) string {
			t.Helper()
			d.failCNI(t, "ADD", true)
			if id, _, err := d.runp(t, pod); err == nil {
				t.Fatalf("crictl runp returned sandbox %s although CNI ADD fails", id)
			}
			return ""
		},
		reset:   func(t *testing.T, d *daemon) { d.failCNI(t, "ADD", false) },
		settle:  settleSandbox,
		allowed: []crashOutcome{outcomeGone},
	}
)

// usernsTrigger is trigger for a pod with its own user namespace (mode POD, a
// shared pid namespace: one userns-pin step, whose pause process is the child that
// made the pod's namespaces). Its settle also requires that a crashed request
// that left nothing listed and nothing pinned left no pause process either (the
// leak check does not look for processes), and that none is left at the end.
func usernsTrigger(trigger *crashTrigger) *crashTrigger {
	u := *trigger
	u.variant = "userns"
	u.how += " with its own user namespace"
	u.pod = func(t *testing.T, d *daemon) string {
		return usernsPod(t, "crash", map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
			"uids": idMapping(0, usernsHostID, 65536), "gids": idMapping(0, usernsHostID, 65536)})
	}
	u.settle = func(t *testing.T, d *daemon, pod, crashed string) crashOutcome {
		t.Helper()
		if crashed != "" && len(d.pods(t)) == 0 && len(d.leaks(t)) == 0 {
			if pids := pauseProcesses(crashed); len(pids) > 0 {
				t.Errorf("after the restart nothing of %s is listed or pinned, yet its pause processes %v run", crashed, pids)
			}
		}
		out := trigger.settle(t, d, pod, crashed)
		if crashed != "" {
			if pids := pauseProcesses(crashed); len(pids) > 0 {
				t.Errorf("pause processes %v of %s run after its removal", pids, crashed)
			}
		}
		return out
	}
	return &u
}

// settleSandbox checks the invariant for a pod sandbox whose request crashed
// (crashed is its ID when known), after the restart: either nothing is listed
// and nothing is left (gone), or nothing is listed and what is left is handed
// whole to the retry (cached), or the sandbox is listed ready and whole and
// the retry gets the same ID (created). Then it removes the sandbox the
// retry got and checks the node is clean.
func settleSandbox(t *testing.T, d *daemon, pod, crashed string) crashOutcome {
	t.Helper()
	listed := d.pods(t)
	left := d.leaks(t) // the daemon runs: no journal part
	adds := len(d.addedIDs(t))
	var out crashOutcome
	var id string
	switch {
	case len(listed) == 0 && len(left) == 0:
		out = outcomeGone
		id = d.mustRunp(t, pod)
		if id == crashed {
			t.Fatalf("nothing of %s was left after the restart, yet the retry got it back", crashed)
		}
		if got := d.addedIDs(t); len(got) != adds+1 || got[len(got)-1] != id {
			t.Fatalf("the retry got %s, but CNI ADD calls are %v: want one new ADD for it", id, got)
		}
	case len(listed) == 0:
		out = outcomeCached
		t.Logf("after the restart nothing is listed; the node holds:\n  %s", strings.Join(left, "\n  "))
		id = d.mustRunp(t, pod)
		if crashed != "" && id != crashed {
			t.Fatalf("after the restart nothing is listed but the node holds what %s made; the retry got a new sandbox %s instead: the kept work is orphaned (neither gone nor returned)", crashed, id)
		}
		if got := d.addedIDs(t); len(got) != adds {
			t.Fatalf("the retry got the kept sandbox %s but CNI ADD was called again (calls %v)", id, got)
		}
	case len(listed) == 1:
		out = outcomeCreated
		id = listed[0]
		if crashed != "" && id != crashed {
			t.Fatalf("after the restart crictl pods lists %s, want the crashed request's %s", id, crashed)
		}
		d.requireState(t, id, "SANDBOX_READY")
		again := d.mustRunp(t, pod)
		if again != id {
			t.Fatalf("the retry of a created sandbox %s got %s, want the same ID (a true duplicate)", id, again)
		}
		if got := d.addedIDs(t); len(got) != adds {
			t.Fatalf("the retry of the created sandbox %s called CNI ADD again (calls %v)", id, got)
		}
	default:
		t.Fatalf("after the restart crictl pods lists %v: more than the one pod requested", listed)
	}
	d.requirePods(t, "after the retry", id)
	d.requireWholeSandbox(t, id)
	d.assertNoLeaks(t, id)

	d.removePod(t, id)
	d.requirePods(t, "after stopp and rmp")
	d.assertNoLeaks(t)
	return out
}

// TestCrashDuringSlowCNI kills the daemon while a slow CNI ADD is in flight:
// after the restart the half-made sandbox is rolled back, no plugin works on
// for it, and no IP allocation appears later, when the plugin's sleep would
// have ended. Two cases: the bridge plugin is slow (it dies with the daemon,
// by its parent-death signal), and the IPAM plugin is slow: the bridge
// plugin's child, which has no parent-death signal, so it outlives the
// daemon and would allocate an address after recovery's DEL unless recovery
// kills it first.
func TestCrashDuringSlowCNI(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	for _, tc := range []struct {
		name string
		slow func(t *testing.T, d *daemon)        // slows the ADD down
		wait func(t *testing.T, d *daemon) string // waits until the slow part runs; the sandbox ID
	}{
		{
			"slow bridge plugin",
			func(t *testing.T, d *daemon) { d.slowCNI(t, delay) },
			func(t *testing.T, d *daemon) string { return d.waitADD(t, 2, 5*time.Second) },
		},
		{
			"slow IPAM plugin outliving the daemon",
			func(t *testing.T, d *daemon) { d.writeSlowIPAMWrapper(t, delay) },
			func(t *testing.T, d *daemon) string {
				id := d.waitADD(t, 2, 5*time.Second)
				d.waitIPAMCall(t, "ADD "+id, 5*time.Second)
				return id
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, daemonOptions{})
			// One pod first, so that the bridge plugin has set the bridge
			// up completely: a bridge whose first ADD is cut off between
			// attaching the veth and pinning the bridge's MAC is left, once
			// the veth is gone, with MAC 00:00:00:00:00:00, and bridge
			// 1.1.1 then fails every ADD ("could not set bridge's mac").
			d.removePod(t, d.mustRunp(t, podConfig(t, "warm-up", "e2e", randomHex(t, 16), 0, false)))
			pod := podConfig(t, "crash-slow", "e2e", randomHex(t, 16), 0, false)
			tc.slow(t, d)
			bg := d.runpBackground(t, "-T", "10s", pod)
			id := tc.wait(t, d)
			killedAt := time.Now()
			d.kill(t)
			r := <-bg
			if r.err == nil {
				t.Fatalf("crictl runp succeeded (%s) although the daemon was killed during CNI ADD", strings.TrimSpace(r.stdout))
			}
			t.Logf("CNI processes of %s still running after the kill: %q", id, pluginProcesses(t, id))
			d.slowCNI(t, 0)

			d.restart(t)
			if procs := pluginProcesses(t, id); len(procs) != 0 {
				t.Errorf("after recovery, CNI processes still work for the rolled-back sandbox %s: %q", id, procs)
			}
			d.requirePods(t, "after the restart")
			if calls := d.cniCalls(t); !slices.Contains(calls, cniCall{"DEL", id}) {
				t.Errorf("recovery did not undo the interrupted CNI ADD of %s with a DEL (calls %v)", id, calls)
			}
			d.assertNoLeaks(t)

			// Past the end of the plugin's sleep: an ADD that lived on would
			// have allocated an address by now.
			time.Sleep(time.Until(killedAt.Add(delay + 2*time.Second)))
			if allocs := d.ipamAllocations(t); len(allocs) != 0 {
				t.Errorf("%v after the crash, host-local holds %v: the interrupted ADD finished after recovery", time.Since(killedAt).Round(time.Second), allocs)
			}
			d.assertNoLeaks(t)

			// The name is free.
			d.writeSlowIPAMWrapper(t, 0)
			again := d.mustRunp(t, pod)
			if again == id {
				t.Fatalf("runp after recovery returned the rolled-back sandbox %s", id)
			}
			d.requireWholeSandbox(t, again)
			d.removePod(t, again)
			d.stopClean(t)
		})
	}
}

// writeSlowIPAMWrapper installs (or, with 0, makes fast) a host-local
// wrapper first in the plugin path: the bridge plugin delegates IPAM to it.
// It logs "<COMMAND> <container ID>" to ipam-calls.log, sleeps delay on ADD,
// then execs the real host-local. It is a child of the bridge plugin with no
// parent-death signal, as the real IPAM plugin is.
func (d *daemon) writeSlowIPAMWrapper(t *testing.T, delay time.Duration) {
	t.Helper()
	script := `#!/bin/bash
# crijournal end-to-end tests: host-local, slowed on ADD.
echo "${CNI_COMMAND} ${CNI_CONTAINERID}" >> ` + shellQuote(filepath.Join(d.base, "ipam-calls.log")) + `
if [ "${CNI_COMMAND}" = ADD ]; then
	sleep ` + strconv.FormatFloat(delay.Seconds(), 'f', 3, 64) + `
fi
exec ` + cniDir + `/host-local "$@"
`
	writeFile(t, filepath.Join(d.pluginDir, "host-local"), script, 0o755)
}

// waitIPAMCall waits until the host-local wrapper has logged the call
// ("<COMMAND> <container ID>").
func (d *daemon) waitIPAMCall(t *testing.T, call string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 20*time.Millisecond, func() error {
		b, _ := os.ReadFile(filepath.Join(d.base, "ipam-calls.log"))
		if slices.Contains(strings.Split(string(b), "\n"), call) {
			return nil
		}
		return fmt.Errorf("the IPAM plugin was not called with %q within %v (calls: %q)", call, within, b)
	})
}

// TestSIGTERMDuringSlowCreation stops the daemon (SIGTERM) while a creation
// waits on a CNI ADD that would take 20 s: the daemon exits within its
// graceful stop timeout (5 s) plus a margin, and the next start rolls the
// creation back or keeps it for the retry; nothing leaks.
func TestSIGTERMDuringSlowCreation(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, daemonOptions{})
	pod := podConfig(t, "sigterm", "e2e", randomHex(t, 16), 0, false)
	d.slowCNI(t, 20*time.Second)
	bg := d.runpBackground(t, "-T", "60s", pod)
	id := d.waitADD(t, 1, 5*time.Second)

	d.terminate(t, 10*time.Second) // graceful stop: 5 s, then requests are cut off
	r := <-bg
	if r.err == nil {
		t.Fatalf("crictl runp succeeded (%s) although the CNI ADD it waited on takes 20s and the daemon stopped", strings.TrimSpace(r.stdout))
	}
	t.Logf("crictl runp failed after %v: %s", r.elapsed.Round(time.Millisecond), strings.TrimSpace(r.stderr))
	for _, rec := range d.records(t) {
		t.Logf("journal after the stop: %s", describeSteps(rec))
	}
	d.checkJournal(t)
	d.slowCNI(t, 0)

	d.restart(t)
	if procs := pluginProcesses(t, id); len(procs) != 0 {
		t.Errorf("after recovery, CNI processes still work for the interrupted sandbox %s: %q", id, procs)
	}
	out := settleSandbox(t, d, pod, id)
	if out != outcomeGone && out != outcomeCached {
		t.Errorf("creation interrupted by SIGTERM: outcome %s, want %s or %s", out, outcomeGone, outcomeCached)
	}
	t.Logf("creation interrupted by SIGTERM: outcome %s", out)
	d.stopClean(t)
}
