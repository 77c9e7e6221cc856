package test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestPodSandboxMetrics calls ListMetricDescriptors and ListPodSandboxMetrics (crictl
// has no command for them) on a daemon that collects every group, for a pod whose
// container spins on a CPU until told to stop and receives a few datagrams: its CPU
// time, memory, processes, open files, writable layer and the pod's network counters
// must show, each metric labelled as its descriptor says.
func TestPodSandboxMetrics(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{extraTOML: []string{`included_pod_metrics = ["all"]`}})
	rt := d.cri(t)
	pod := d.containerPod(t, "metrics", false)
	podID := d.mustRunp(t, pod)
	spin := d.run(t, podID, containerConfig(t, "spin", 0, []string{"sh", "-c",
		"while [ ! -e /stop ]; do :; done; echo stopped; exec sleep 3600"}), pod)
	d.sendDatagrams(t, podID)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	descs, err := rt.ListMetricDescriptors(ctx, &runtimeapi.ListMetricDescriptorsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, desc := range descs.GetDescriptors() {
		keys[desc.GetName()] = len(desc.GetLabelKeys())
	}
	// The CPU counter is in whole seconds: wait for the first one to be spent.
	var pm *runtimeapi.PodSandboxMetrics
	testenv.Eventually(t, time.Minute, 500*time.Millisecond, func() error {
		resp, err := rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
		if err != nil {
			return err
		}
		pm = nil
		for _, m := range resp.GetPodMetrics() {
			if m.GetPodSandboxId() == podID {
				pm = m
			}
		}
		if pm == nil || len(pm.GetContainerMetrics()) != 1 {
			return fmt.Errorf("metrics of pod %s: %v, want its one container's", podID, pm)
		}
		if v := metricValue(pm.GetContainerMetrics()[0].GetMetrics(), "container_cpu_usage_seconds_total", "total"); v < 1 {
			return fmt.Errorf("container_cpu_usage_seconds_total = %d, want 1 s or more", v)
		}
		return nil
	})
	d.execSync(t, spin, "touch", "/stop")

	cm := pm.GetContainerMetrics()[0]
	if cm.GetContainerId() != spin {
		t.Fatalf("container metrics of %s, want %s", cm.GetContainerId(), spin)
	}
	for _, m := range append(pm.GetMetrics(), cm.GetMetrics()...) {
		if n, ok := keys[m.GetName()]; !ok || n != len(m.GetLabelValues()) {
			t.Errorf("%s has label values %q, its descriptor %d keys (described: %v)", m.GetName(), m.GetLabelValues(), n, ok)
		}
	}
	status, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	md := status.GetStatus().GetMetadata()
	if got, want := strings.Join(cm.GetMetrics()[0].GetLabelValues()[:5], " "),
		strings.Join([]string{spin, testImage, md.GetNamespace(), md.GetName(), "spin"}, " "); got != want {
		t.Errorf("container labels %q, want %q", got, want)
	}
	ms := cm.GetMetrics()
	for _, c := range []struct {
		name, label string
		min         uint64
	}{
		{"container_memory_working_set_bytes", "", 1},
		{"container_memory_usage_bytes", "", 1},
		{"container_memory_rss", "", 1},
		{"container_processes", "", 1},
		{"container_threads", "", 1},
		{"container_file_descriptors", "", 1},
		{"container_fs_usage_bytes", "", 1}, // measured soon after the start
		{"container_fs_limit_bytes", "", 1},
		{"container_fs_inodes_total", "", 1},
		{"container_last_seen", "", uint64(time.Now().Add(-time.Hour).Unix())},
		{"container_start_time_seconds", "", uint64(time.Now().Add(-time.Hour).Unix())},
	} {
		if v := metricValue(ms, c.name, c.label); v < c.min {
			t.Errorf("%s = %d, want at least %d", c.name, v, c.min)
		}
	}
	if v := metricValue(pm.GetMetrics(), "container_network_receive_bytes_total", "eth0"); v == 0 {
		t.Errorf("pod's container_network_receive_bytes_total{interface=eth0} = %d, want the datagrams' bytes", v)
	}
	if v := metricValue(pm.GetMetrics(), "container_network_transmit_packets_total", "eth0"); v == 0 {
		t.Errorf("pod's container_network_transmit_packets_total{interface=eth0} = %d, want packets", v)
	}
}

// metricValue returns the value of the metric called name whose last label value is
// label ("" for one without extra labels); 0 when there is none.
func metricValue(ms []*runtimeapi.Metric, name, label string) uint64 {
	for _, m := range ms {
		lv := m.GetLabelValues()
		if m.GetName() == name && (label == "" && len(lv) == 5 || len(lv) > 5 && lv[len(lv)-1] == label) {
			return m.GetValue().GetValue()
		}
	}
	return 0
}
