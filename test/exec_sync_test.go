package test

import (
	"context"
	"errors"
	"fmt"
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

	holdCtx, release := context.WithCancel(context.Background())
	defer release()
	held := make(chan error, 1)
	go func() {
		_, err := cri.ExecSync(holdCtx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sleep", "600"}})
		held <- err
	}()
	execTrue := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := cri.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"true"}, Timeout: 20})
		return err
	}
	// Until the sleep holds the only slot, a second call may still get it.
	testenv.Eventually(t, 30*time.Second, 20*time.Millisecond, func() error {
		select {
		case err := <-held:
			t.Fatalf("the holding ExecSync ended early: %v", err)
		default:
		}
		err := execTrue()
		switch code := status.Code(err); {
		case code == codes.ResourceExhausted:
			return nil
		case err == nil:
			return errors.New("a second ExecSync ran beside the first")
		default:
			t.Fatalf("second ExecSync: %v, want ResourceExhausted or success", err)
			return nil
		}
	})
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
	d.removePod(t, podID)
	d.stopClean(t)
}
