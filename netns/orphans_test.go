package netns

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// TestKillPluginsKillsOnlyTheSandboxsProcesses starts two "plugins" with different
// CNI_CONTAINERIDs and checks that only the first is killed.
func TestKillPluginsKillsOnlyTheSandboxsProcesses(t *testing.T) {
	id, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	_, exited := startFakePlugin(t, id)
	bystander, _ := startFakePlugin(t, other)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := KillPlugins(ctx, id)
	if err != nil || n != 1 {
		t.Fatalf("KillPlugins = %d, %v; want 1, nil", n, err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("the sandbox's plugin still runs")
	}
	if err := syscall.Kill(bystander, 0); err != nil {
		t.Fatal("another sandbox's plugin was killed")
	}
	if n, err := KillPlugins(ctx, id); n != 0 || err != nil {
		t.Fatalf("second KillPlugins = %d, %v", n, err)
	}
	if _, err := KillPlugins(ctx, "../x"); err == nil {
		t.Fatal("an invalid ID was accepted")
	}
}

// TestAttachUndoLooksForPluginsUnlessDone: the undo of an attach step kills the plugins
// still at work for the sandbox when its ADD may have been cut off (the step is not done,
// or its last undo failed), and does not look for them when the step is done: that ADD
// returned, and no plugin of it can run. Either way the sandbox's address is released.
func TestAttachUndoLooksForPluginsUnlessDone(t *testing.T) {
	pluginDir := requirePlugins(t)
	requireRoot(t)
	for _, tt := range []struct {
		status     journal.StepStatus
		wantKilled bool
	}{
		{journal.StepIntent, true},
		{journal.StepUndoFailed, true},
		{journal.StepDone, false},
	} {
		t.Run(string(tt.status), func(t *testing.T) {
			tn := newTestNet(t, pluginDir)
			id, path := pinTestNet(t)
			pod := Pod{Name: "pod", Namespace: "default", UID: "uid"}
			if _, err := tn.Attach(context.Background(), id, path, "", Attachment{SandboxID: id, Pod: pod}.cniArgs(), nil); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			// A process that looks like a plugin still working for the sandbox.
			_, exited := startFakePlugin(t, id)

			networks := &Networks{ConfDir: tn.confDir, PluginDirs: []string{pluginDir}, CacheDir: tn.cacheDir}
			step := journal.Step{Kind: StepAttach, Status: tt.status, Args: AttachStep(tn.Network, id, path, DefaultIfName, pod, nil).Args}
			if err := undoAttach(networks)(context.Background(), journal.Record{ID: id}, step); err != nil {
				t.Fatalf("undo: %v", err)
			}
			if got := tn.allocations(t); len(got) != 0 {
				t.Errorf("allocations %v after the undo, want none", got)
			}
			// A killed plugin's exit is awaited for long (the machine may be busy: CI
			// runs packages side by side); one that must live is given a second to die.
			wait := time.Second
			if tt.wantKilled {
				wait = 10 * time.Second
			}
			select {
			case <-exited:
				if !tt.wantKilled {
					t.Error("the undo of a done step killed a process of the sandbox")
				}
			case <-time.After(wait):
				if tt.wantKilled {
					t.Errorf("the sandbox's plugin still runs %v after the undo", wait)
				}
			}
		})
	}
}

// startFakePlugin starts a process whose environment names sandbox cid as a CNI plugin's
// does, and kills it at the end of the test. It returns the process's PID and a channel
// closed once it has exited (and been reaped).
func startFakePlugin(t *testing.T, cid string) (pid int, exited <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "30")
	cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + cid}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return cmd.Process.Pid, done
}
