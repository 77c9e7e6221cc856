package nri

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// goldenStep is how testdata/golden/steps.json keeps one of this package's steps as a
// journal record stores it: the kind and the arguments an undo reads after a restart.
type goldenStep struct {
	Kind journal.StepKind  `json:"kind"`
	Args map[string]string `json:"args"`
}

// TestStepsGolden pins what NRI leaves in the journal, which the undo of a pod or
// container reads back after a restart or an upgrade (testdata/golden/steps.json): the
// step kinds, their argument keys, the pod and the container as protobuf JSON, and the
// stop marker. The golden arguments must decode to the messages they were made from,
// and this code must encode those messages to the same JSON (protojson's spacing aside).
// Changing the file (-update) means records an earlier release wrote are read otherwise:
// that needs a migration, and a CHANGELOG entry.
func TestStepsGolden(t *testing.T) {
	pod := &api.PodSandbox{Id: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Name: "web",
		Uid: "uid-1", Namespace: "default", Labels: map[string]string{"app": "web"}, RuntimeHandler: "runc",
		Annotations: map[string]string{"left-out": "of the step: the record holds the configuration"},
		Linux:       &api.LinuxPodSandbox{CgroupParent: "/kubepods/pod-uid-1", Namespaces: []*api.LinuxNamespace{{Type: "network", Path: "/var/run/crijournal/ns/netns/0123"}}},
		Pid:         4242}
	ctr := &api.Container{Id: "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210", PodSandboxId: pod.Id,
		Name: "nginx", State: api.ContainerState_CONTAINER_CREATED, Labels: map[string]string{"tier": "front"},
		Args: []string{"nginx", "-g", "daemon off;"}, Env: []string{"A=1"},
		Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Memory: &api.LinuxMemory{Limit: &api.OptionalInt64{Value: 1 << 27}}}}}
	steps := []journal.Intended{
		{Kind: SandboxStep(nil, pod).Kind, Args: SandboxStep(nil, pod).Args},
		{Kind: ContainerStep(nil, pod, ctr).Kind, Args: ContainerStep(nil, pod, ctr).Args},
	}
	var got []goldenStep
	for _, s := range steps {
		args := map[string]string{}
		for k, v := range s.Args {
			var c bytes.Buffer
			if err := json.Compact(&c, []byte(v)); err != nil {
				t.Fatal(err)
			}
			args[k] = c.String()
		}
		got = append(got, goldenStep{Kind: s.Kind, Args: args})
	}
	b, err := json.MarshalIndent(map[string]any{"steps": got, "marker_stopped": MarkerStopped}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/steps.json", append(b, '\n'))

	// The golden arguments, as an earlier release stored them, decode to the messages.
	raw, err := os.ReadFile("testdata/golden/steps.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct{ Steps []goldenStep }
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	want := map[string]proto.Message{ArgPod: withoutAnnotations(pod), ArgContainer: ctr}
	for _, s := range golden.Steps {
		for key, arg := range s.Args {
			m := want[key].ProtoReflect().New().Interface()
			if err := decode(arg, m); err != nil {
				t.Fatalf("%s's %s: %v", s.Kind, key, err)
			}
			if !proto.Equal(m, want[key]) {
				t.Errorf("%s's %s decodes to %v, want %v", s.Kind, key, m, want[key])
			}
		}
	}
}
