package netns

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillPluginsKillsOnlyTheSandboxsProcesses starts two "plugins" with different
// CNI_CONTAINERIDs and checks that only the first is killed.
func TestKillPluginsKillsOnlyTheSandboxsProcesses(t *testing.T) {
	id, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	start := func(cid string) *exec.Cmd {
		cmd := exec.Command("sleep", "30")
		cmd.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + cid}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	victim, bystander := start(id), start(other)
	exited := make(chan error, 1)
	go func() { exited <- victim.Wait() }()

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
	if err := syscall.Kill(bystander.Process.Pid, 0); err != nil {
		t.Fatal("another sandbox's plugin was killed")
	}
	if n, err := KillPlugins(ctx, id); n != 0 || err != nil {
		t.Fatalf("second KillPlugins = %d, %v", n, err)
	}
	if _, err := KillPlugins(ctx, "../x"); err == nil {
		t.Fatal("an invalid ID was accepted")
	}
}
