package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkCreateContainer measures CreateContainer, one at a time, in one host-network
// pod, and where its time goes: the daemon runs at debug level, and its "step done" lines
// give each step's duration (storage-container: the root filesystem; oci-container:
// conmon and runc create), its "container created" line the whole call's. Reported as
// medians: step-<kind>-ms, and other-ms for what is outside the steps (validation, image
// look-up, spec, journal commits). StartContainer is timed too (start-ms).
//
//	go test -tags containers_image_openpgp,exclude_graphdriver_btrfs -run '^$' \
//	    -bench CreateContainer -benchtime 30x ./test/
func BenchmarkCreateContainer(b *testing.B) {
	b.Setenv("CRIJOURNAL_BENCH_LOG_LEVEL", "debug")
	node := startBenchNode(b)
	ctx := b.Context()
	var starts []time.Duration
	var ids []string
	b.Cleanup(func() {
		for _, id := range ids {
			_, _ = node.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
		}
	})
	i := 0
	for b.Loop() {
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("create%d", i)},
			Image:    &runtimeapi.ImageSpec{Image: testImage},
			Command:  []string{"sleep", "3600"},
			LogPath:  fmt.Sprintf("create%d.log", i),
		}
		resp, err := node.rt.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: node.podID, Config: cfg, SandboxConfig: node.pod})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, resp.GetContainerId())
		b.StopTimer()
		t0 := time.Now()
		if _, err := node.rt.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.GetContainerId()}); err != nil {
			b.Fatal(err)
		}
		starts = append(starts, time.Since(t0))
		b.StartTimer()
		i++
	}
	b.StopTimer()
	log, err := os.ReadFile(filepath.Join(node.base, "daemon.log"))
	if err != nil {
		b.Fatal(err)
	}
	steps := map[string][]time.Duration{}
	for _, m := range regexp.MustCompile(`msg="step done" kind=container id=\S+ (?:name=\S+ )?step=(\S+) took=(\S+)`).FindAllSubmatch(log, -1) {
		if d, err := time.ParseDuration(string(m[2])); err == nil {
			steps[string(m[1])] = append(steps[string(m[1])], d)
		}
	}
	if len(steps) == 0 {
		b.Fatal("no \"step done\" lines with step= and took= in the daemon's log")
	}
	var totals []time.Duration
	for _, m := range regexp.MustCompile(`msg="container created" .* took=(\S+)`).FindAllSubmatch(log, -1) {
		if d, err := time.ParseDuration(string(m[1])); err == nil {
			totals = append(totals, d)
		}
	}
	if len(totals) == 0 {
		b.Fatal("no \"container created\" lines with took= in the daemon's log")
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	other := median(totals)
	for kind, ds := range steps {
		b.ReportMetric(ms(median(ds)), "step-"+kind+"-ms")
		other -= median(ds)
	}
	b.ReportMetric(ms(median(totals)), "create-ms")
	b.ReportMetric(ms(other), "other-ms")
	b.ReportMetric(ms(median(starts)), "start-ms")
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
