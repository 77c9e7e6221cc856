package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Pid namespace TARGET (kubectl debug --target): a container whose namespace
// option pid is TARGET joins the pid namespace of the container target_id
// names, which must be running in the same pod.

// withPidTarget sets a container's pid namespace mode to TARGET with the
// target container's ID.
func withPidTarget(targetID string) ctrOption {
	return func(cfg map[string]any) {
		cfg["linux"] = map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{
			"pid": int(runtimeapi.NamespaceMode_TARGET), "target_id": targetID,
		}}}
	}
}

// TestPidNamespaceTarget runs a debug container in the pid namespace of a
// running target container: it sees the target's process as PID 1 and its own
// beside it. A target that is unknown, in another pod, not running or not
// named at all is refused with NotFound, InvalidArgument, FailedPrecondition
// and InvalidArgument, and nothing is created.
func TestPidNamespaceTarget(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})

	pod := d.containerPod(t, "pidtarget", false)
	podID := d.mustRunp(t, pod)
	target := d.run(t, podID, containerConfig(t, "target", 0, []string{"sleep", "3600"}), pod)
	debug := d.run(t, podID, containerConfig(t, "debug", 0, []string{"sleep", "3601"}, withPidTarget(target)), pod)

	procs := d.containerPs(t, debug)
	t.Logf("ps in the debug container %s: %v", debug, procs)
	if got := commandOf(procs, 1); got != "sleep 3600" {
		t.Errorf("PID 1 in the debug container is %q, want the target's sleep 3600: %v", got, procs)
	}
	if n := countCommand(procs, "sleep 3601"); n != 1 {
		t.Errorf("the debug container sees %d of its own sleep 3601, want 1: %v", n, procs)
	}
	if got := strings.ReplaceAll(d.execSync(t, debug, "cat", "/proc/1/cmdline"), "\x00", " "); strings.TrimSpace(got) != "sleep 3600" {
		t.Errorf("/proc/1/cmdline in the debug container is %q, want the target's sleep 3600", got)
	}
	// The target's own view is unchanged: its namespace now holds the debug
	// container's process too.
	if n := countCommand(d.containerPs(t, target), "sleep 3601"); n != 1 {
		t.Errorf("the target sees %d sleep 3601 of the debug container, want 1", n)
	}

	// Refusals, each before anything is created.
	other := d.containerPod(t, "pidtarget-other", false)
	otherID := d.mustRunp(t, other)
	elsewhere := d.run(t, otherID, containerConfig(t, "elsewhere", 0, []string{"sleep", "3600"}), other)
	created := d.mustCreate(t, podID, containerConfig(t, "created", 0, []string{"sleep", "3600"}), pod)
	before := d.ps(t, true)
	for _, tc := range []struct {
		name, target, code string
	}{
		{"unknown target", randomID(t), "NotFound"},
		{"target in another pod", elsewhere, "InvalidArgument"},
		{"target created, not started", created, "FailedPrecondition"},
		{"no target ID", "", "InvalidArgument"},
	} {
		_, stderr, err := d.create(t, nil, podID, containerConfig(t, "refused", 0, []string{"sleep", "3602"}, withPidTarget(tc.target)), pod)
		requireCode(t, "crictl create with pid TARGET, "+tc.name, err, stderr, tc.code)
		t.Logf("%s: %s", tc.name, strings.TrimSpace(stderr))
	}
	requireListed(t, "after the refused creates", "crictl ps -a -q", d.ps(t, true), before)

	// Stopping the target ends its namespace: the kernel kills the debug
	// container's process with the namespace's init. An exited target is refused.
	d.mustCrictl(t, "stop", "-t", "5", target)
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() error {
		if d.inspect(t, debug).Status.State != "CONTAINER_EXITED" {
			return fmt.Errorf("the debug container %s still runs 10s after its target stopped", debug)
		}
		return nil
	})
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "late", 0, []string{"sleep", "3602"}, withPidTarget(target)), pod)
	requireCode(t, "crictl create with pid TARGET of an exited target", err, stderr, "FailedPrecondition")
	d.removePod(t, podID)
	d.removePod(t, otherID)
	d.stopClean(t)
}
