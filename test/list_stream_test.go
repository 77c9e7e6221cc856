package test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// recvAll reads a Stream* call to its EOF and returns every item of every chunk, and
// the number of chunks; a chunk without items fails the test (the CRI wants at least one).
func recvAll[R any, E any](t *testing.T, what string, recv func() (*R, error), items func(*R) []E) ([]E, int) {
	t.Helper()
	var all []E
	n := 0
	for {
		r, err := recv()
		if errors.Is(err, io.EOF) {
			return all, n
		}
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n++
		if len(items(r)) == 0 {
			t.Fatalf("%s: chunk %d holds no item", what, n)
		}
		all = append(all, items(r)...)
	}
}

// TestStreamListsEqualLists drives every Stream* call of CRI v1.37 (StreamPodSandboxes,
// StreamContainers, StreamContainerStats, StreamPodSandboxStats, StreamPodSandboxMetrics,
// StreamImages) over the daemon's socket with 110 pods and a few containers: each sends
// what its List* counterpart answers, each item once, in more than one chunk where the
// items exceed one (100 items a chunk), with the filters.
func TestStreamListsEqualLists(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	conn := d.criConn(t)
	t.Cleanup(func() { conn.Close() })
	rt, img := runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Pods on the node's network, cheap to make: 130 of them, by 4 callers at once.
	const pods = 110
	cfgs := make([]*runtimeapi.PodSandboxConfig, pods)
	ids := make([]string, pods)
	paths := make([]string, pods)
	for i := range cfgs {
		paths[i] = d.containerPod(t, fmt.Sprintf("many-%03d", i), true)
		cfgs[i] = loadPodConfig(t, paths[i])
		if i%2 == 0 {
			cfgs[i].Labels["half"] = "even"
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	next := make(chan int, pods)
	for i := range pods {
		next <- i
	}
	close(next)
	for range 4 {
		wg.Go(func() {
			for i := range next {
				resp, err := rt.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: cfgs[i]})
				if err != nil {
					errs <- fmt.Errorf("RunPodSandbox %d: %w", i, err)
				}
				ids[i] = resp.GetPodSandboxId()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var ctrs []string
	for i := range 3 {
		ctrs = append(ctrs, d.run(t, ids[i], containerConfig(t, fmt.Sprintf("c%d", i), 0, sleeper), paths[i]))
	}

	byID := func(a, b interface{ GetId() string }) int { return strings.Compare(a.GetId(), b.GetId()) }
	t.Run("pods", func(t *testing.T) {
		for _, f := range []*runtimeapi.PodSandboxFilter{
			nil,
			{LabelSelector: map[string]string{"half": "even"}},
			{Id: ids[5]},
			{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_NOTREADY}},
		} {
			list, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			s, err := rt.StreamPodSandboxes(ctx, &runtimeapi.StreamPodSandboxesRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			got, chunks := recvAll(t, "StreamPodSandboxes", s.Recv, (*runtimeapi.StreamPodSandboxesResponse).GetPodSandboxes)
			want := list.GetItems()
			slices.SortFunc(got, func(a, b *runtimeapi.PodSandbox) int { return byID(a, b) })
			slices.SortFunc(want, func(a, b *runtimeapi.PodSandbox) int { return byID(a, b) })
			if !proto.Equal(&runtimeapi.ListPodSandboxResponse{Items: got}, &runtimeapi.ListPodSandboxResponse{Items: want}) {
				t.Fatalf("filter %v: streamed %d pods, listed %d; they differ", f, len(got), len(want))
			}
			if wantChunks := (len(want) + 99) / 100; chunks != wantChunks {
				t.Errorf("filter %v: %d pods in %d chunks, want %d", f, len(got), chunks, wantChunks)
			}
			t.Logf("filter %v: %d pods in %d chunks", f, len(got), chunks)
		}
		if n := len(d.pods(t)); n != pods {
			t.Fatalf("crictl pods lists %d, want %d", n, pods)
		}
	})
	t.Run("containers", func(t *testing.T) {
		for _, f := range []*runtimeapi.ContainerFilter{nil, {PodSandboxId: ids[1]}, {Id: ctrs[2]}} {
			list, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			s, err := rt.StreamContainers(ctx, &runtimeapi.StreamContainersRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := recvAll(t, "StreamContainers", s.Recv, (*runtimeapi.StreamContainersResponse).GetContainers)
			want := list.GetContainers()
			slices.SortFunc(got, func(a, b *runtimeapi.Container) int { return byID(a, b) })
			slices.SortFunc(want, func(a, b *runtimeapi.Container) int { return byID(a, b) })
			if len(want) == 0 || !proto.Equal(&runtimeapi.ListContainersResponse{Containers: got}, &runtimeapi.ListContainersResponse{Containers: want}) {
				t.Fatalf("filter %v: streamed %v, listed %v", f, got, want)
			}
		}
	})
	// Stats change from call to call: the same items, by ID.
	t.Run("container stats", func(t *testing.T) {
		f := &runtimeapi.ContainerStatsFilter{PodSandboxId: ids[0]}
		for _, f := range []*runtimeapi.ContainerStatsFilter{nil, f} {
			list, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			s, err := rt.StreamContainerStats(ctx, &runtimeapi.StreamContainerStatsRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := recvAll(t, "StreamContainerStats", s.Recv, (*runtimeapi.StreamContainerStatsResponse).GetContainerStats)
			ids := func(st []*runtimeapi.ContainerStats) []string {
				var out []string
				for _, s := range st {
					if s.GetMemory().GetWorkingSetBytes() == nil {
						t.Errorf("stats of %s without memory", s.GetAttributes().GetId())
					}
					out = append(out, s.GetAttributes().GetId())
				}
				slices.Sort(out)
				return out
			}
			if g, w := ids(got), ids(list.GetStats()); len(w) == 0 || !slices.Equal(g, w) {
				t.Fatalf("filter %v: streamed stats of %v, listed %v", f, g, w)
			}
		}
	})
	podIDs := func(st []*runtimeapi.PodSandboxStats) []string {
		var out []string
		for _, s := range st {
			out = append(out, s.GetAttributes().GetId())
		}
		slices.Sort(out)
		return out
	}
	t.Run("pod stats", func(t *testing.T) {
		for _, f := range []*runtimeapi.PodSandboxStatsFilter{nil, {LabelSelector: map[string]string{"half": "even"}}} {
			list, err := rt.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			s, err := rt.StreamPodSandboxStats(ctx, &runtimeapi.StreamPodSandboxStatsRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			got, chunks := recvAll(t, "StreamPodSandboxStats", s.Recv, (*runtimeapi.StreamPodSandboxStatsResponse).GetPodSandboxStats)
			if g, w := podIDs(got), podIDs(list.GetStats()); len(w) == 0 || !slices.Equal(g, w) {
				t.Fatalf("filter %v: streamed stats of %d pods, listed %d; they differ", f, len(g), len(w))
			}
			t.Logf("filter %v: stats of %d pods in %d chunks", f, len(got), chunks)
		}
	})
	t.Run("pod metrics", func(t *testing.T) {
		list, err := rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := rt.StreamPodSandboxMetrics(ctx, &runtimeapi.StreamPodSandboxMetricsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		got, chunks := recvAll(t, "StreamPodSandboxMetrics", s.Recv, (*runtimeapi.StreamPodSandboxMetricsResponse).GetPodSandboxMetrics)
		ids := func(m []*runtimeapi.PodSandboxMetrics) []string {
			var out []string
			for _, p := range m {
				out = append(out, p.GetPodSandboxId())
			}
			slices.Sort(out)
			return out
		}
		if g, w := ids(got), ids(list.GetPodMetrics()); len(w) != pods || !slices.Equal(g, w) || chunks < 2 {
			t.Fatalf("streamed metrics of %d pods in %d chunks, listed %d; want %d in 2 or more", len(g), chunks, len(w), pods)
		}
	})
	t.Run("images", func(t *testing.T) {
		for _, f := range []*runtimeapi.ImageFilter{nil, {Image: &runtimeapi.ImageSpec{Image: testImage}}} {
			list, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			s, err := img.StreamImages(ctx, &runtimeapi.StreamImagesRequest{Filter: f})
			if err != nil {
				t.Fatal(err)
			}
			got, _ := recvAll(t, "StreamImages", s.Recv, (*runtimeapi.StreamImagesResponse).GetImages)
			if len(list.GetImages()) == 0 || !proto.Equal(&runtimeapi.ListImagesResponse{Images: got}, list) {
				t.Fatalf("filter %v: streamed %v, listed %v", f, got, list.GetImages())
			}
		}
	})
}
