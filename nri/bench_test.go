package nri

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

type noSource struct{}

func (noSource) List(context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	return nil, nil, nil
}
func (noSource) Update(context.Context, []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return nil, nil
}
func (noSource) Evict(context.Context, []*api.ContainerEviction) error { return nil }

// BenchmarkNoPlugin is what NRI costs a pod and a container on a node with no plugin:
// the conversions and every event of their lives, enabled (listening, no plugin
// connected) and disabled.
func BenchmarkNoPlugin(b *testing.B) {
	cfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "p", Uid: "u", Namespace: "n"},
		Labels: map[string]string{"a": "b"}}
	ccfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"}, Command: []string{"sh"}}
	for _, enabled := range []bool{false, true} {
		name := "disabled"
		if enabled {
			name = "enabled"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			n, err := New(Options{Enable: enabled, Socket: filepath.Join(dir, "nri.sock"), PluginDir: filepath.Join(dir, "plugins"),
				PluginConfigDir: filepath.Join(dir, "conf.d")})
			if err != nil {
				b.Fatal(err)
			}
			if err := n.Start(noSource{}); err != nil {
				b.Fatal(err)
			}
			defer n.Stop()
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				unblock := n.Block()
				pod := PodSandbox(Pod{ID: "p1", Config: cfg})
				ctr := Container(Ctr{ID: "c1", SandboxID: "p1", Config: ccfg})
				_ = n.RunPodSandbox(ctx, pod)
				_, _ = n.CreateContainer(ctx, pod, ctr)
				unblock()
				_ = n.PostCreateContainer(ctx, pod, ctr)
				_ = n.StartContainer(ctx, pod, ctr)
				_ = n.PostStartContainer(ctx, pod, ctr)
				_, _ = n.StopContainer(ctx, pod, ctr)
				_ = n.RemoveContainer(ctx, pod, ctr)
				_ = n.StopPodSandbox(ctx, pod)
				_ = n.RemovePodSandbox(ctx, pod)
			}
		})
	}
}
