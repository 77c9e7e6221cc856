package test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestExecSyncConcurrencyCap: with exec_sync_max_concurrent = 1, an ExecSync while
// another runs is refused at once with ResourceExhausted, and succeeds once the other
// has ended (its client went away: the command is killed and its slot freed).
func TestExecSyncConcurrencyCap(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{extraTOML: []string{"exec_sync_max_concurrent = 1"}})
	pod := d.containerPod(t, "execcap", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "sleeper", 0, sleeper), pod)
	cri := d.cri(t)

	// The holding call's command, a sleep of its own, runs once the call has its slot.
	n, _ := strconv.ParseUint(testenv.RandomHex(t, 2), 16, 32)
	hold := []string{"sleep", strconv.FormatUint(400000+n, 10)}
	holdCtx, release := context.WithCancel(context.Background())
	defer release()
	held := make(chan error, 1)
	go func() {
		_, err := cri.ExecSync(holdCtx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: hold})
		held <- err
	}()
	waitProcesses(t, hold[0]+" "+hold[1], 1, 30*time.Second)

	execTrue := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := cri.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 20})
		return err
	}
	if err := execTrue(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("ExecSync while another holds the only slot: %v, want ResourceExhausted", err)
	}
	release()
	if err := <-held; status.Code(err) != codes.Canceled {
		t.Fatalf("the holding ExecSync, its client gone: %v, want Canceled", err)
	}
	// The server notices the client's end, kills the sleep and frees the slot.
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		if err := execTrue(); err != nil {
			return fmt.Errorf("ExecSync after the first ended: %w", err)
		}
		return nil
	})
	waitProcesses(t, hold[0]+" "+hold[1], 0, 30*time.Second)
	d.removePod(t, podID)
	d.stopClean(t)
}
