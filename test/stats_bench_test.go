package test

import (
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkListContainerStats measures what the kubelet asks every ~10 s: the
// stats of every container, with benchContainers() running containers (100
// by default; CRIJOURNAL_BENCH_CONTAINERS changes it) in one host-network pod,
// on the overlay driver. One operation is one ListContainerStats call over
// the daemon's socket; ns/container divides it by the number of containers.
//
//	go test -tags containers_image_openpgp,exclude_graphdriver_btrfs -run '^$' \
//	    -bench ListContainerStats -benchtime 50x ./test/
func BenchmarkListContainerStats(b *testing.B) {
	n := benchContainers(b)
	node := startBenchNode(b)
	ctx := b.Context()
	ids := node.runContainers(b, n)

	req := &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{}}
	for b.Loop() {
		resp, err := node.rt.ListContainerStats(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.GetStats()) != len(ids) {
			b.Fatalf("ListContainerStats returned %d stats, want %d", len(resp.GetStats()), len(ids))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/container")
}
