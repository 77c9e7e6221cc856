package test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// BenchmarkContainerStatus measures one ContainerStatus call over the daemon's
// socket, with benchContainers() running containers (100 by default;
// CRIJOURNAL_BENCH_CONTAINERS changes it) in one host-network pod, asked in
// turn. It reports the daemon's CPU time per call (daemon-cpu-µs/op) and that
// of the children it forked and reaped meanwhile (children-cpu-µs/op), from
// /proc/<pid>/stat.
//
//	go test -tags containers_image_openpgp,exclude_graphdriver_btrfs -run '^$' \
//	    -bench ContainerStatus -benchtime 500x ./test/
func BenchmarkContainerStatus(b *testing.B) {
	n := benchContainers(b)
	node := startBenchNode(b)
	ctx := b.Context()
	ids := node.runContainers(b, n)

	before := node.cpu(b)
	i := 0
	for b.Loop() {
		resp, err := node.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ids[i%len(ids)]})
		if err != nil {
			b.Fatal(err)
		}
		if st := resp.GetStatus().GetState(); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
			b.Fatalf("container %s is %s, want RUNNING", ids[i%len(ids)], st)
		}
		i++
	}
	used := node.cpu(b).sub(before)
	b.ReportMetric(float64(used.self.Microseconds())/float64(b.N), "daemon-cpu-µs/op")
	b.ReportMetric(float64(used.children.Microseconds())/float64(b.N), "children-cpu-µs/op")
}

// BenchmarkIdlePoll measures what a node costs while nothing happens on it but
// the kubelet's polling: benchPods() pods (30 by default; CRIJOURNAL_BENCH_PODS
// changes it), host network, each with one running container, polled as the
// kubelet does (ListPodSandbox and ListContainers every second, PodSandboxStatus
// and ContainerStatus of each every 10 s) for CRIJOURNAL_IDLE_SECONDS (default
// 60). It reports the daemon's CPU time over that window as a percentage of
// one core, from /proc/<pid>/stat: utime+stime of the daemon itself
// (daemon-%core), and cutime+cstime of the children it reaped meanwhile
// (children-%core: the runtime processes it forked). One iteration is the
// whole window; run it with -benchtime 1x. Target: daemon-%core under 1 with
// 100 pods (docs/BENCHMARKS.md, "Targets"; the bench's idle workload, which adds
// the stats and metrics calls, prints its own).
//
//	CRIJOURNAL_BENCH_PODS=100 go test -tags containers_image_openpgp,exclude_graphdriver_btrfs \
//	    -run '^$' -bench IdlePoll -benchtime 1x -timeout 30m ./test/
func BenchmarkIdlePoll(b *testing.B) {
	pods := envCount(b, "CRIJOURNAL_BENCH_PODS", 30)
	window := time.Duration(envCount(b, "CRIJOURNAL_IDLE_SECONDS", 60)) * time.Second
	node := startBenchNode(b)
	ctx := b.Context()
	podIDs, ctrIDs := node.runPods(b, pods)
	// Let the creations' after-effects (lazy commits, exit watches) settle.
	time.Sleep(2 * time.Second)

	for b.Loop() {
		before := node.cpu(b)
		start := time.Now()
		polls, statuses := 0, 0
		tick := time.NewTicker(time.Second)
		for time.Since(start) < window {
			if _, err := node.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{}); err != nil {
				b.Fatal(err)
			}
			resp, err := node.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			if err != nil {
				b.Fatal(err)
			}
			if len(resp.GetContainers()) < len(ctrIDs) {
				b.Fatalf("ListContainers lists %d containers, want at least %d", len(resp.GetContainers()), len(ctrIDs))
			}
			if polls%10 == 0 {
				for i := range podIDs {
					if _, err := node.rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podIDs[i]}); err != nil {
						b.Fatal(err)
					}
					st, err := node.rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: ctrIDs[i]})
					if err != nil {
						b.Fatal(err)
					}
					if s := st.GetStatus().GetState(); s != runtimeapi.ContainerState_CONTAINER_RUNNING {
						b.Fatalf("container %s is %s, want RUNNING", ctrIDs[i], s)
					}
					statuses++
				}
			}
			polls++
			<-tick.C
		}
		tick.Stop()
		elapsed := time.Since(start)
		used := node.cpu(b).sub(before)
		b.ReportMetric(100*used.self.Seconds()/elapsed.Seconds(), "daemon-%core")
		b.ReportMetric(100*used.children.Seconds()/elapsed.Seconds(), "children-%core")
		b.ReportMetric(float64(pods), "pods")
		b.Logf("%d pods, %v: %d list polls, %d status pairs; daemon %v, children %v", pods, elapsed.Round(time.Millisecond), polls, statuses, used.self, used.children)
	}
}

// cpuTime is a process's CPU time: its own, and that of its reaped children.
type cpuTime struct{ self, children time.Duration }

func (c cpuTime) sub(o cpuTime) cpuTime {
	return cpuTime{self: c.self - o.self, children: c.children - o.children}
}

// cpu reads the daemon's CPU time from /proc/<pid>/stat: utime+stime, and
// cutime+cstime.
func (n *benchNode) cpu(b *testing.B) cpuTime {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n.pid))
	if err != nil {
		b.Fatal(err)
	}
	s := string(raw)
	// pid (comm) state ppid ...: comm may hold spaces; utime is field 14.
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ticks := func(i int) time.Duration { // i is the field number of proc(5)
		v, err := strconv.ParseInt(fields[i-3], 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat field %d: %v", n.pid, i, err)
		}
		return time.Duration(v) * time.Second / clockTicks
	}
	return cpuTime{self: ticks(14) + ticks(15), children: ticks(16) + ticks(17)}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on Linux.
const clockTicks = 100

// runPods runs count host-network pods, each with one sleeping container,
// four at a time, and returns their IDs; b.Cleanup stops and removes them.
func (n *benchNode) runPods(b *testing.B, count int) (podIDs, ctrIDs []string) {
	b.Helper()
	podIDs, ctrIDs = make([]string, count), make([]string, count)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		for _, id := range podIDs {
			if id == "" {
				continue
			}
			if _, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
				b.Errorf("stop benchmark pod %s: %v", id, err)
			}
			if _, err := n.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
				b.Errorf("remove benchmark pod %s: %v", id, err)
			}
		}
	})
	fourAtATime(b, count, "pod", func(i int) error {
		pod := &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: fmt.Sprintf("idle%d", i), Namespace: "bench", Uid: fmt.Sprintf("%s-%d", n.podID[:12], i)},
			LogDirectory: n.pod.GetLogDirectory(),
			Linux:        n.pod.GetLinux(),
		}
		resp, err := n.rt.RunPodSandbox(b.Context(), &runtimeapi.RunPodSandboxRequest{Config: pod})
		if err != nil {
			return err
		}
		podIDs[i] = resp.GetPodSandboxId()
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
			Image:    &runtimeapi.ImageSpec{Image: testImage},
			Command:  []string{"sleep", "3600"},
			LogPath:  fmt.Sprintf("idle%d.log", i),
		}
		cresp, err := n.rt.CreateContainer(b.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: podIDs[i], Config: cfg, SandboxConfig: pod})
		if err != nil {
			return err
		}
		ctrIDs[i] = cresp.GetContainerId()
		_, err = n.rt.StartContainer(b.Context(), &runtimeapi.StartContainerRequest{ContainerId: ctrIDs[i]})
		return err
	})
	return podIDs, ctrIDs
}
