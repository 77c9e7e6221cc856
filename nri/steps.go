package nri

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/crijournal/crijournal/journal"
)

// Step kinds this package owns. The strings are stored in the journal: never change them.
const (
	// StepPod tells the plugins about a pod (RunPodSandbox). Args: ArgPod. Made by
	// SandboxStep.
	StepPod journal.StepKind = "nri-pod"
	// StepContainer asks the plugins about a container (CreateContainer). Args: ArgPod
	// and ArgContainer. Made by ContainerStep.
	StepContainer journal.StepKind = "nri-container"
)

// Stages of this package's steps, as inspect, logs and waiting requests show them.
const (
	StagePod       = "NRI plugins: RunPodSandbox"
	StageContainer = "NRI plugins: CreateContainer"
)

// Keys of the steps' arguments: the pod and the container as the plugins were told
// about them (protobuf JSON), so that the undo tells them about the same ones.
const (
	ArgPod       = "pod"
	ArgContainer = "container"
)

// MarkerStopped is the key of the marker a sandbox's or container's record gets, in the
// commit of its stop, once StopPodSandbox or StopContainer has been sent to the plugins:
// the undo (at removal) then sends only the Remove.
const MarkerStopped = "nri_stopped"

// SandboxStep returns the step that sends RunPodSandbox for pod to the plugins. Its
// undo sends StopPodSandbox (unless the record has MarkerStopped) and RemovePodSandbox,
// for the pod as the step's arguments keep it (see withoutAnnotations).
func SandboxStep(n *NRI, pod *api.PodSandbox) journal.Action[struct{}] {
	return journal.Action[struct{}]{Kind: StepPod, Stage: StagePod, Args: map[string]string{ArgPod: encode(withoutAnnotations(pod))},
		Run: func(ctx context.Context) (struct{}, error) {
			return struct{}{}, n.RunPodSandbox(ctx, pod)
		}}
}

// ContainerStep returns the step that sends CreateContainer for ctr in pod to the
// plugins; its result is their answer, whose adjustment the caller applies to the
// container's spec (Adjust). Its undo sends StopContainer (unless the record has
// MarkerStopped) and RemoveContainer.
func ContainerStep(n *NRI, pod *api.PodSandbox, ctr *api.Container) journal.Action[Created] {
	return journal.Action[Created]{Kind: StepContainer, Stage: StageContainer,
		Args: map[string]string{ArgPod: encode(withoutAnnotations(pod)), ArgContainer: encode(ctr)},
		Run: func(ctx context.Context) (Created, error) {
			return n.CreateContainer(ctx, pod, ctr)
		}}
}

// withoutAnnotations returns a copy of pod without its annotations, as the steps keep it
// in their arguments: the sandbox's record holds the pod's configuration already, and
// its annotations, which may be large (they are the kubelet's and the user's free-form
// data), would otherwise be in every record twice or three times and make each of its
// commits that much larger. The Stop and Remove events an undo sends carry the pod's
// identity, labels and the rest, not its annotations.
func withoutAnnotations(pod *api.PodSandbox) *api.PodSandbox {
	if pod == nil || len(pod.Annotations) == 0 {
		return pod
	}
	c := proto.Clone(pod).(*api.PodSandbox)
	c.Annotations = nil
	return c
}

// RegisterUndos registers the undo of every step kind this package owns. n may be
// disabled (nil): the undos then have nobody to tell and succeed.
//
// A plugin's error is logged, not returned: a failed undo would be retried, and each
// retry would send the event again to every plugin, also to those that took it. The
// plugins are told once; one that failed to take it is its own to fix.
func RegisterUndos(reg *journal.Registry, n *NRI) {
	reg.Register(StepPod, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		if !n.Enabled() {
			return nil
		}
		pod := &api.PodSandbox{}
		if err := decode(step.Args[ArgPod], pod); err != nil {
			return fmt.Errorf("undo %s of %s: %w", StepPod, rec.ID, err)
		}
		if _, stopped := rec.Marker(MarkerStopped); !stopped {
			n.logged(rec, n.StopPodSandbox(ctx, pod))
		}
		n.logged(rec, n.RemovePodSandbox(ctx, pod))
		return nil
	})
	reg.Register(StepContainer, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		if !n.Enabled() {
			return nil
		}
		pod, ctr := &api.PodSandbox{}, &api.Container{}
		if err := decode(step.Args[ArgPod], pod); err != nil {
			return fmt.Errorf("undo %s of %s: %w", StepContainer, rec.ID, err)
		}
		if err := decode(step.Args[ArgContainer], ctr); err != nil {
			return fmt.Errorf("undo %s of %s: %w", StepContainer, rec.ID, err)
		}
		if _, stopped := rec.Marker(MarkerStopped); !stopped {
			ctr.State = api.ContainerState_CONTAINER_STOPPED
			_, err := n.StopContainer(ctx, pod, ctr)
			n.logged(rec, err)
		}
		n.logged(rec, n.RemoveContainer(ctx, pod, ctr))
		return nil
	})
}

// logged logs an error of the plugins about rec, if any.
func (n *NRI) logged(rec journal.Record, err error) {
	if err != nil {
		n.log.Warn("NRI plugins failed an event; it is not sent again", "kind", rec.Kind, "id", rec.ID, "name", rec.Name, "err", err)
	}
}

// encode returns m as protobuf JSON, for a step's arguments.
func encode(m proto.Message) string {
	b, err := protojson.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("nri: encode %T: %v", m, err)) // plain messages always encode
	}
	return string(b)
}

// decode reads a step's argument written by encode.
func decode(s string, m proto.Message) error {
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal([]byte(s), m); err != nil {
		return fmt.Errorf("recorded %T: %w", m, err)
	}
	return nil
}
