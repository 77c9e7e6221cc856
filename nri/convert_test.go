package nri

import (
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodSandbox(t *testing.T) {
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata:    &runtimeapi.PodSandboxMetadata{Name: "web", Uid: "u1", Namespace: "ns"},
		Labels:      map[string]string{"app": "web"},
		Annotations: map[string]string{"a": "b"},
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/podu1",
			Resources: &runtimeapi.LinuxContainerResources{CpuShares: 512, MemoryLimitInBytes: 1 << 20}},
	}
	got := PodSandbox(Pod{ID: "id1", Config: cfg, RuntimeHandler: "runc", IPs: []string{"10.0.0.2"},
		Namespaces: map[string]string{"net": "/ns/net/id1", "ipc": "/ns/ipc/id1"}})
	want := &api.PodSandbox{Id: "id1", Name: "web", Uid: "u1", Namespace: "ns", Labels: map[string]string{"app": "web"},
		Annotations: map[string]string{"a": "b"}, RuntimeHandler: "runc", Ips: []string{"10.0.0.2"},
		Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/podu1",
			PodResources: &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(512))}, Memory: &api.LinuxMemory{Limit: api.Int64(int64(1 << 20))}},
			Namespaces:   []*api.LinuxNamespace{{Type: "ipc", Path: "/ns/ipc/id1"}, {Type: "network", Path: "/ns/net/id1"}}},
	}
	if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
		t.Errorf("PodSandbox (-want +got):\n%s", d)
	}
	// The labels are copied: the CRI config is not changed through the NRI pod.
	got.Labels["app"] = "x"
	if cfg.Labels["app"] != "web" {
		t.Error("PodSandbox shares the config's labels")
	}
}

func TestContainerFromSpec(t *testing.T) {
	oom := 100
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image: &runtimeapi.ImageSpec{Image: "busybox"}, Labels: map[string]string{"l": "1"}}
	spec := &specs.Spec{
		Annotations: map[string]string{"io.kubernetes.cri.container-name": "app"},
		Process: &specs.Process{Args: []string{"sh"}, Env: []string{"A=1"}, OOMScoreAdj: &oom,
			User: specs.User{UID: 1, GID: 2}, Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 10, Soft: 5}}},
		Mounts: []specs.Mount{{Destination: "/data", Source: "/host", Type: "bind", Options: []string{"rbind"}}},
		Linux: &specs.Linux{CgroupsPath: "/kubepods/x", Namespaces: []specs.LinuxNamespace{{Type: "network", Path: "/ns/net"}},
			Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: ptr(int64(4096))}}},
	}
	got := Container(Ctr{ID: "c1", SandboxID: "p1", Config: cfg, Spec: spec, State: api.ContainerState_CONTAINER_CREATED})
	if got.Id != "c1" || got.PodSandboxId != "p1" || got.Name != "app" || got.State != api.ContainerState_CONTAINER_CREATED {
		t.Errorf("identity: %v", got)
	}
	if d := cmp.Diff([]string{"sh"}, got.Args); d != "" {
		t.Errorf("args: %s", d)
	}
	if d := cmp.Diff([]string{"A=1"}, got.Env); d != "" {
		t.Errorf("env: %s", d)
	}
	if got.Annotations["io.kubernetes.cri.container-name"] != "app" {
		t.Errorf("annotations are the spec's: %v", got.Annotations)
	}
	if len(got.Mounts) != 1 || got.Mounts[0].Destination != "/data" {
		t.Errorf("mounts: %v", got.Mounts)
	}
	if got.Linux.GetOomScoreAdj().GetValue() != 100 || got.Linux.GetCgroupsPath() != "/kubepods/x" ||
		got.Linux.GetResources().GetMemory().GetLimit().GetValue() != 4096 || len(got.Linux.GetNamespaces()) != 1 {
		t.Errorf("linux: %v", got.Linux)
	}
	if got.User.GetUid() != 1 || got.User.GetGid() != 2 || len(got.Rlimits) != 1 || got.Image.GetName() != "busybox" {
		t.Errorf("user %v, rlimits %v, image %v", got.User, got.Rlimits, got.Image)
	}
}

func TestContainerWithoutSpec(t *testing.T) {
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Command: []string{"sh"}, Args: []string{"-c", "true"}, Envs: []*runtimeapi.KeyValue{{Key: "A", Value: []byte("1")}}}
	got := Container(Ctr{ID: "c1", SandboxID: "p1", Config: cfg})
	if d := cmp.Diff([]string{"sh", "-c", "true"}, got.Args); d != "" {
		t.Errorf("args: %s", d)
	}
	if d := cmp.Diff([]string{"A=1"}, got.Env); d != "" {
		t.Errorf("env: %s", d)
	}
}

func TestCRIResourcesRoundTrip(t *testing.T) {
	cri := &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 50000, CpuShares: 256, MemoryLimitInBytes: 1 << 30,
		CpusetCpus: "0-1", CpusetMems: "0", MemorySwapLimitInBytes: 2 << 30, OomScoreAdj: 5,
		HugepageLimits: []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 4 << 20}}, Unified: map[string]string{"memory.high": "1000"}}
	back := CRIResources(Resources(cri), &runtimeapi.LinuxContainerResources{OomScoreAdj: 5})
	if d := cmp.Diff(cri, back, protocmp.Transform()); d != "" {
		t.Errorf("CRI -> NRI -> CRI (-want +got):\n%s", d)
	}
}

func TestCRIResourcesKeepsWhatThePluginLeaves(t *testing.T) {
	base := &runtimeapi.LinuxContainerResources{CpuShares: 256, MemoryLimitInBytes: 1 << 30}
	r := &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(int64(2 << 30))}}
	got := CRIResources(r, base)
	if got.CpuShares != 256 || got.MemoryLimitInBytes != 2<<30 {
		t.Errorf("got %v, want shares 256 kept and the memory limit the plugin's", got)
	}
	if base.MemoryLimitInBytes != 1<<30 {
		t.Error("CRIResources changed its base")
	}
}

func TestAdjust(t *testing.T) {
	spec := &specs.Spec{Process: &specs.Process{Args: []string{"sh"}, Env: []string{"A=1", "B=2"}},
		Annotations: map[string]string{"keep": "1"}, Linux: &specs.Linux{}}
	adj := &api.ContainerAdjustment{}
	adj.AddEnv("C", "3")
	adj.RemoveEnv("B")
	adj.AddAnnotation("added.by/plugin", "yes")
	adj.AddMount(&api.Mount{Destination: "/extra", Source: "/tmp", Type: "bind", Options: []string{"rbind", "ro"}})
	if err := Adjust(spec, adj); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"A=1", "C=3"}, spec.Process.Env); d != "" {
		t.Errorf("env (-want +got):\n%s", d)
	}
	if spec.Annotations["added.by/plugin"] != "yes" || spec.Annotations["keep"] != "1" {
		t.Errorf("annotations: %v", spec.Annotations)
	}
	if len(spec.Mounts) != 1 || spec.Mounts[0].Destination != "/extra" {
		t.Errorf("mounts: %v", spec.Mounts)
	}
	if err := Adjust(spec, nil); err != nil {
		t.Errorf("no adjustment: %v", err)
	}
}

func TestStepArgsRoundTrip(t *testing.T) {
	pod := &api.PodSandbox{Id: "p", Name: "n", Labels: map[string]string{"a": "b"}}
	a := SandboxStep(nil, pod)
	got := &api.PodSandbox{}
	if err := decode(a.Args[ArgPod], got); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(pod, got, protocmp.Transform()); d != "" {
		t.Errorf("pod (-want +got):\n%s", d)
	}
}

func TestDisabledIsANoOp(t *testing.T) {
	n, err := New(Options{Enable: false})
	if n != nil || err != nil {
		t.Fatalf("New(disabled) = %v, %v; want nil, nil", n, err)
	}
	if n.Enabled() {
		t.Error("nil NRI enabled")
	}
	n.Block()()
	if _, err := n.CreateContainer(t.Context(), nil, nil); err != nil {
		t.Error(err)
	}
	if err := n.Start(nil); err != nil {
		t.Error(err)
	}
	n.Stop()
}

func ptr[T any](v T) *T { return &v }

// TestStepArgsLeaveOutAnnotations: the steps keep the pod in their arguments without its
// annotations (the record holds them already), and the pod the events get is untouched.
func TestStepArgsLeaveOutAnnotations(t *testing.T) {
	pod := &api.PodSandbox{Id: "p", Name: "web", Uid: "u", Namespace: "ns",
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"big": "ballast"}}
	ctr := &api.Container{Id: "c", PodSandboxId: "p", Name: "app"}
	for name, args := range map[string]map[string]string{
		"pod":       SandboxStep(nil, pod).Args,
		"container": ContainerStep(nil, pod, ctr).Args,
	} {
		got := &api.PodSandbox{}
		if err := decode(args[ArgPod], got); err != nil {
			t.Fatalf("%s step: %v", name, err)
		}
		if len(got.Annotations) != 0 || got.Id != "p" || got.Uid != "u" || got.Labels["app"] != "web" {
			t.Errorf("%s step keeps the pod %v, want its identity and labels without annotations", name, got)
		}
	}
	if pod.Annotations["big"] != "ballast" {
		t.Error("the steps changed the pod the events are sent")
	}
}
