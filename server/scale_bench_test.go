package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
)

// Scale: what the kubelet's polling and one more creation cost as records pile up. The
// records are made by the creation flow (begin, steps, finish) over a real, fsynced
// journal, with the objects and configs the real flows store; no runtime is involved.

// scaleServer returns a server over a fresh journal whose registry undoes the fake step
// kinds (a no-op), for the benchmarks and the tests that fill it with records.
func scaleServer(tb testing.TB) *Server {
	tb.Helper()
	reg := journal.NewRegistry()
	noop := func(context.Context, journal.Record, journal.Step) error { return nil }
	reg.Register(fakeFirst, noop)
	reg.Register(fakeSecond, noop)
	log := slog.New(slog.DiscardHandler)
	j, err := journal.Open(filepath.Join(tb.TempDir(), "journal.db"), journal.Options{Logger: log, Registry: reg})
	if err != nil {
		tb.Fatal(err)
	}
	s := New(Deps{Journal: j, Log: log})
	tb.Cleanup(func() {
		s.Close()
		j.Close()
	})
	return s
}

// benchPodConfig is a kubelet-sized pod config: labels and annotations as a Deployment's pod has.
func benchPodConfig(i int) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("web-7d9f8b6c5-%05d", i), Namespace: "default", Uid: fmt.Sprintf("0b6e2d1c-5f3a-4e7b-9c2d-%012d", i)},
		Hostname: fmt.Sprintf("web-7d9f8b6c5-%05d", i), LogDirectory: fmt.Sprintf("/var/log/pods/default_web_%d", i),
		Labels:      map[string]string{"app": "web", "pod-template-hash": "7d9f8b6c5", "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default"},
		Annotations: map[string]string{"kubernetes.io/config.seen": "2026-01-01T00:00:00Z", "kubernetes.io/config.source": "api"},
		Linux:       &runtimeapi.LinuxPodSandboxConfig{CgroupParent: fmt.Sprintf("/kubepods/besteffort/pod%d", i)},
	}
}

func benchContainerConfig() *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "web"},
		Image:    &runtimeapi.ImageSpec{Image: "registry.k8s.io/nginx:1.25"},
		Command:  []string{"nginx", "-g", "daemon off;"},
		Envs:     []*runtimeapi.KeyValue{{Key: "PATH", Value: []byte("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")}, {Key: "KUBERNETES_SERVICE_HOST", Value: []byte("10.96.0.1")}},
		Labels:   map[string]string{"io.kubernetes.container.name": "web", "io.kubernetes.pod.name": "web", "io.kubernetes.pod.namespace": "default"},
		Annotations: map[string]string{"io.kubernetes.container.hash": "8a2b3c4d", "io.kubernetes.container.restartCount": "0",
			"io.kubernetes.container.terminationMessagePath": "/dev/termination-log"},
		LogPath: "web/0.log",
	}
}

// benchCreate runs one creation-shaped flow (begin, two steps, finish) of kind under name and
// returns its ID.
func benchCreate(b testing.TB, s *Server, kind journal.Kind, name, parent string, object any) string {
	c, existing, err := s.creations.Begin(context.Background(), "bench-create", journal.BeginRequest{Kind: kind, Name: name, Parent: parent, Fingerprint: "fp-" + name, Stage: "reserve"}, creation.Same{})
	if err != nil || c == nil {
		b.Fatalf("begin %s = %q, %v; want a new creation", name, existing.ExistingID, err)
	}
	if _, err := creation.Step(c, long, fakeStep(fakeFirst, "first "+name, returns(1))); err != nil {
		b.Fatal(err)
	}
	if _, err := creation.Step(c, long, fakeStep(fakeSecond, "second "+name, returns(2))); err != nil {
		b.Fatal(err)
	}
	rec, err := c.Finish(object)
	if err != nil {
		b.Fatal(err)
	}
	return rec.ID
}

// populate makes pods sandboxes with one container each, created and running.
func populate(b testing.TB, s *Server, pods int) (podIDs, ctrIDs []string) {
	b.Helper()
	now := time.Now()
	for i := range pods {
		pod := benchPodConfig(i)
		podID := benchCreate(b, s, journal.KindSandbox, fmt.Sprintf("pod-%d", i), "", sandboxObject{
			Config: mustMarshal(pod), RuntimeHandler: "runc", IPs: []string{fmt.Sprintf("10.88.%d.%d", i/250, i%250+2)}, CreatedAt: now,
			Namespaces: map[string]string{"net": "/run/crijournal/ns/netns/x", "ipc": "/run/crijournal/ns/ipcns/x", "uts": "/run/crijournal/ns/utsns/x"},
		})
		ctrID := benchCreate(b, s, journal.KindContainer, fmt.Sprintf("ctr-%d", i), podID, containerObject{
			Config: mustMarshal(benchContainerConfig()), SandboxID: podID, Image: "registry.k8s.io/nginx:1.25",
			ImageID: "0123456789abcdef", ImageRef: "registry.k8s.io/nginx@sha256:0123", Handler: "runc",
			LogPath: "/var/log/pods/x/web/0.log", Bundle: "/run/crijournal/bundles/x", Rootfs: "/var/lib/crijournal/storage/overlay/x/merged", CreatedAt: now,
		})
		if err := s.journal.SetMarker(ctrID, markerStartedAt, nowMarker()); err != nil {
			b.Fatal(err)
		}
		podIDs, ctrIDs = append(podIDs, podID), append(ctrIDs, ctrID)
	}
	return podIDs, ctrIDs
}

// BenchmarkList measures the kubelet's relist (ListPodSandbox, ListContainers, each
// listing every one) and one PodSandboxStatus, with 1,000 pods of one container each:
// 2,000 records. Target: each List call under 5 ms (docs/BENCHMARKS.md, "Targets").
func BenchmarkList(b *testing.B) {
	const pods = 1000
	s := scaleServer(b)
	podIDs, _ := populate(b, s, pods)
	ctx := context.Background()
	b.Run("ListPodSandbox", func(b *testing.B) {
		for b.Loop() {
			resp, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			if err != nil || len(resp.GetItems()) != pods {
				b.Fatalf("ListPodSandbox: %d, %v; want %d", len(resp.GetItems()), err, pods)
			}
		}
	})
	b.Run("ListContainers", func(b *testing.B) {
		for b.Loop() {
			resp, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err != nil || len(resp.GetContainers()) != pods {
				b.Fatalf("ListContainers: %d, %v; want %d", len(resp.GetContainers()), err, pods)
			}
		}
	})
	b.Run("ListContainersOfPod", func(b *testing.B) {
		for b.Loop() {
			resp, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: &runtimeapi.ContainerFilter{PodSandboxId: podIDs[pods/2]}})
			if err != nil || len(resp.GetContainers()) != 1 {
				b.Fatalf("ListContainers of a pod: %d, %v; want 1", len(resp.GetContainers()), err)
			}
		}
	})
	b.Run("PodSandboxStatus", func(b *testing.B) {
		i := 0
		for b.Loop() {
			if _, err := s.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podIDs[i%pods]}); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
}

// BenchmarkCreationWithExisting measures one creation-shaped flow (begin, two steps,
// finish: the journal work of a RunPodSandbox, without its actions) on a journal that
// already holds 0 or 500 pods with a container each (0 or 1,000 records). Each created
// record is removed again, untimed, so the count stays put. commits/op counts the
// journal's commits per creation.
func BenchmarkCreationWithExisting(b *testing.B) {
	for _, existing := range []int{0, 500} {
		b.Run(fmt.Sprintf("pods=%d", existing), func(b *testing.B) {
			s := scaleServer(b)
			populate(b, s, existing)
			obj := sandboxObject{Config: mustMarshal(benchPodConfig(99999)), RuntimeHandler: "runc", CreatedAt: time.Now()}
			before := s.journal.Stats().Commits
			var removing int64
			i := 0
			for b.Loop() {
				id := benchCreate(b, s, journal.KindSandbox, fmt.Sprintf("new-%d", i), "", obj)
				b.StopTimer()
				c0 := s.journal.Stats().Commits
				if err := s.journal.Remove(context.Background(), id); err != nil {
					b.Fatal(err)
				}
				removing += s.journal.Stats().Commits - c0
				b.StartTimer()
				i++
			}
			b.ReportMetric(float64(s.journal.Stats().Commits-before-removing)/float64(b.N), "commits/op")
		})
	}
}
