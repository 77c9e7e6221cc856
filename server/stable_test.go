package server

import (
	"testing"

	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage"
)

// TestStepKindsAreStable pins the step kinds and marker keys stored in journal records:
// renaming one would strand the undo of every record already on disk (journal's own
// strings are pinned in its tests).
func TestStepKindsAreStable(t *testing.T) {
	for got, want := range map[string]string{
		string(netns.StepPin): "netns-pin", string(netns.StepAttach): "cni-attach",
		string(netns.StepPause): "pause-process", string(storage.StepContainerStorage): "storage-container",
		string(oci.StepRuntimeContainer): "oci-container", string(oci.StepConmon): "oci-conmon", string(netns.StepUserPin): "userns-pin",
		string(netns.StepResolvConf): "pod-resolv-conf", string(netns.StepHostname): "pod-hostname", string(netns.StepShm): "pod-shm",
		markerStopped: "stopped", markerNetworkStopped: "network_stopped", markerPauseExited: "pause_exited",
		markerStartedAt: "started_at", markerFinishedAt: "finished_at", markerExitCode: "exit_code", markerReason: "reason",
	} {
		if got != want {
			t.Errorf("stored string %q, was %q: a rename needs a migration", got, want)
		}
	}
}
