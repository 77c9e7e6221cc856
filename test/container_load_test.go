package test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Containers under load: concurrent creations in several pods, and the
// latency of CreateContainer and StartContainer.

// TestContainerConcurrency creates, starts and removes containers in two
// pods at once through the gRPC API, as a kubelet starting several pods
// does: every one is created once, runs, and goes without leaks.
func TestContainerConcurrency(t *testing.T) {
	t.Parallel()
	const perPod = 6
	d, _ := startContainerDaemon(t, daemonOptions{})
	cri := d.cri(t)
	type result struct {
		id  string
		err error
	}
	var pods []string
	results := make(chan result, 2*perPod)
	for p := range 2 {
		pod := d.containerPod(t, fmt.Sprintf("conc%d", p), false)
		podID := d.mustRunp(t, pod)
		pods = append(pods, podID)
		podCfg := loadPodConfig(t, pod)
		for i := range perPod {
			cfg := loadContainerConfig(t, containerConfig(t, fmt.Sprintf("c%d", i), 0, sleeper))
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				resp, err := cri.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
				if err != nil {
					results <- result{err: err}
					return
				}
				_, err = cri.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
				results <- result{resp.ContainerId, err}
			}()
		}
	}
	var ids []string
	for range 2 * perPod {
		r := <-results
		if r.err != nil {
			t.Errorf("create and start: %v", r.err)
			continue
		}
		ids = append(ids, r.id)
	}
	if t.Failed() {
		t.FailNow()
	}
	d.requirePs(t, "after the concurrent creations", ids...)
	for _, id := range ids {
		d.requireCtrState(t, id, "CONTAINER_RUNNING")
	}
	d.assertNoLeaks(t, append(slices.Clone(pods), ids...)...)

	errs := make(chan error, len(ids))
	for _, id := range ids {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			_, err := cri.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id})
			errs <- err
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Errorf("remove: %v", err)
		}
	}
	d.requirePs(t, "after the concurrent removals")
	d.assertNoLeaks(t, pods...)
	for _, p := range pods {
		d.removePod(t, p)
	}
	d.stopClean(t)
}

// TestContainerLatency measures CreateContainer + StartContainer through the
// gRPC API, one container at a time, and the pull of the test image.
func TestContainerLatency(t *testing.T) {
	t.Parallel()
	const n = 30
	d, pullTook := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "latency", false)
	podID := d.mustRunp(t, pod)
	podCfg := loadPodConfig(t, pod)
	cri := d.cri(t)
	var lat []time.Duration
	for i := range n {
		cfg := loadContainerConfig(t, containerConfig(t, fmt.Sprintf("c%d", i), 0, []string{"sleep", "3600"}))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		resp, err := cri.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: podID, Config: cfg, SandboxConfig: podCfg})
		if err == nil {
			_, err = cri.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId})
		}
		took := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("container %d: %v", i, err)
		}
		lat = append(lat, took)
	}
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	pct := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	t.Logf("MEASURE CreateContainer+StartContainer over %d containers (sequential, gRPC): p50 %v, p99 %v, min %v, max %v; image pull %v",
		n, pct(0.50).Round(time.Millisecond), pct(0.99).Round(time.Millisecond), sorted[0].Round(time.Millisecond),
		sorted[len(sorted)-1].Round(time.Millisecond), pullTook.Round(time.Millisecond))
	if got := d.ps(t, false); len(got) != n {
		t.Errorf("crictl ps lists %d running containers, want %d", len(got), n)
	}
	start := time.Now()
	d.removePod(t, podID)
	t.Logf("stopp + rmp of a pod with %d running containers took %v", n, time.Since(start).Round(time.Millisecond))
	d.requirePs(t, "after rmp")
	d.stopClean(t)
}
