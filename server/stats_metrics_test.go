package server

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
)

// critestMetrics are the metrics critest v1.37.0 requires ("runtime should support
// returning metrics descriptors"): its expected names but those it lists as not
// implemented by every runtime (hugetlb, pressure, cpu quota, memory reservation,
// ulimits).
var critestMetrics = []string{
	"container_blkio_device_usage_total", "container_cpu_cfs_periods_total", "container_cpu_cfs_throttled_periods_total",
	"container_cpu_cfs_throttled_seconds_total", "container_cpu_system_seconds_total", "container_cpu_usage_seconds_total",
	"container_cpu_user_seconds_total", "container_file_descriptors", "container_fs_inodes_free", "container_fs_inodes_total",
	"container_fs_limit_bytes", "container_fs_reads_bytes_total", "container_fs_reads_total", "container_fs_usage_bytes",
	"container_fs_writes_bytes_total", "container_fs_writes_total", "container_last_seen", "container_memory_cache",
	"container_memory_failcnt", "container_memory_failures_total", "container_memory_kernel_usage", "container_memory_mapped_file",
	"container_memory_max_usage_bytes", "container_memory_rss", "container_memory_swap", "container_memory_usage_bytes",
	"container_memory_working_set_bytes", "container_network_receive_bytes_total", "container_network_receive_errors_total",
	"container_network_receive_packets_dropped_total", "container_network_receive_packets_total",
	"container_network_transmit_bytes_total", "container_network_transmit_errors_total",
	"container_network_transmit_packets_dropped_total", "container_network_transmit_packets_total", "container_oom_events_total",
	"container_processes", "container_sockets", "container_spec_cpu_period", "container_spec_cpu_shares",
	"container_spec_memory_limit_bytes", "container_spec_memory_swap_limit_bytes", "container_start_time_seconds",
	"container_threads", "container_threads_max",
}

func metricsServer(groups ...string) *Server {
	cfg := config.Default()
	cfg.IncludedPodMetrics = groups
	return &Server{cfg: cfg}
}

func TestListMetricDescriptors(t *testing.T) {
	for _, tt := range []struct {
		groups []string
		want   []string // names that must be there
		count  int
	}{
		{groups: []string{}, want: []string{"container_last_seen"}, count: 1},
		{groups: []string{"cpu"}, want: []string{"container_last_seen", "container_cpu_usage_seconds_total"}, count: 7},
		{groups: []string{"network", "spec"}, want: []string{"container_network_receive_bytes_total", "container_spec_cpu_quota"}, count: 15},
		{groups: []string{"all"}, want: critestMetrics, count: 46},
	} {
		t.Run(fmt.Sprint(tt.groups), func(t *testing.T) {
			resp, err := metricsServer(tt.groups...).ListMetricDescriptors(context.Background(), &runtimeapi.ListMetricDescriptorsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			names := map[string]bool{}
			for _, d := range resp.GetDescriptors() {
				if names[d.GetName()] {
					t.Errorf("%s described twice", d.GetName())
				}
				names[d.GetName()] = true
				if d.GetHelp() == "" || !slices.Equal(d.GetLabelKeys()[:len(metricLabelKeys)], metricLabelKeys) {
					t.Errorf("descriptor %v: want help and the label keys %v first", d, metricLabelKeys)
				}
			}
			for _, n := range tt.want {
				if !names[n] {
					t.Errorf("%s not described", n)
				}
			}
			if len(names) != tt.count {
				t.Errorf("%d descriptors, want %d", len(names), tt.count)
			}
		})
	}
}

// fakeMetricInput is a container's input with a distinct figure everywhere.
func fakeMetricInput() *metricInput {
	return &metricInput{
		now: time.Unix(1700000100, 0),
		cg: oci.CgroupMetrics{
			CgroupStats: oci.CgroupStats{CPUUsageNanos: 7_500_000_000, MemoryUsage: 2000, MemoryWorkingSet: 1800, RSS: 1000,
				PageFaults: 70, MajorPageFaults: 2, Processes: 9},
			CPUUserNanos: 5_900_000_000, CPUSystemNanos: 1_200_000_000, CFSPeriods: 40, CFSThrottledPeriods: 3, CFSThrottledNanos: 2_000_000_000,
			MemoryCache: 300, MemoryMappedFile: 40, MemoryKernel: 50, MemorySwap: 60, MemoryMaxUsage: 3000, MemoryFailcnt: 4, OOMKills: 1,
			ProcessCount: 2, ThreadsMax: 100, FileDescriptors: 12, Sockets: 3,
			IO: []oci.DeviceIO{{Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 8192, Reads: 1, Writes: 2}},
		},
		res:     &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 1024, MemoryLimitInBytes: 1 << 26, MemorySwapLimitInBytes: 1 << 27},
		created: time.Unix(1700000000, 0),
		layer:   &runtimeapi.FilesystemUsage{Timestamp: 1700000090e9, UsedBytes: &runtimeapi.UInt64Value{Value: 555}},
		fs:      &unix.Statfs_t{Bsize: 4096, Blocks: 1000, Files: 500, Ffree: 200},
		ifs: []netns.InterfaceStats{{Name: "eth0", RxBytes: 1, RxErrors: 2, TxBytes: 3, TxErrors: 4, RxPackets: 5, TxPackets: 6, RxDropped: 7, TxDropped: 8},
			{Name: "net1", RxBytes: 10}},
		device: func(major, minor uint64) string { return fmt.Sprintf("/dev/%d-%d", major, minor) },
	}
}

// TestComputeMetrics maps a container's (and a pod's) fake figures to metrics: the
// value and extra labels of each, and label values as many as the descriptor's keys.
func TestComputeMetrics(t *testing.T) {
	s := metricsServer("all")
	groups, _ := s.includedMetrics()
	resp, _ := s.ListMetricDescriptors(context.Background(), &runtimeapi.ListMetricDescriptorsRequest{})
	keys := map[string]int{}
	for _, d := range resp.GetDescriptors() {
		keys[d.GetName()] = len(d.GetLabelKeys())
	}
	base := []string{"ctr", "busybox", "ns", "pod", "c"}
	got := map[string]uint64{} // by name and extra label values
	seen := map[string]bool{}
	for _, pod := range []bool{false, true} {
		for _, m := range computeMetrics(groups, pod, base, fakeMetricInput()) {
			if n, ok := keys[m.GetName()]; !ok || len(m.GetLabelValues()) != n {
				t.Errorf("%s has %d label values, its descriptor %d keys", m.GetName(), len(m.GetLabelValues()), n)
			}
			if !slices.Equal(m.GetLabelValues()[:len(base)], base) {
				t.Errorf("%s labels %q, want %q first", m.GetName(), m.GetLabelValues(), base)
			}
			key := fmt.Sprintf("%s %v", m.GetName(), m.GetLabelValues()[len(base):])
			got[key] = m.GetValue().GetValue()
			seen[m.GetName()] = true
			if m.GetName() == "container_fs_usage_bytes" && m.GetTimestamp() != 1700000090e9 {
				t.Errorf("container_fs_usage_bytes stamped %d, want the layer's measurement time", m.GetTimestamp())
			} else if m.GetName() != "container_fs_usage_bytes" && m.GetTimestamp() != 0 {
				t.Errorf("%s stamped %d, want 0 (read on demand)", m.GetName(), m.GetTimestamp())
			}
		}
	}
	for _, name := range critestMetrics {
		if !seen[name] {
			t.Errorf("no value of %s", name)
		}
	}
	for key, want := range map[string]uint64{
		"container_last_seen []":                                  1700000100,
		"container_cpu_usage_seconds_total [total]":               7,
		"container_cpu_user_seconds_total []":                     5,
		"container_cpu_system_seconds_total []":                   1,
		"container_cpu_cfs_periods_total []":                      40,
		"container_cpu_cfs_throttled_periods_total []":            3,
		"container_cpu_cfs_throttled_seconds_total []":            2,
		"container_memory_usage_bytes []":                         2000,
		"container_memory_working_set_bytes []":                   1800,
		"container_memory_rss []":                                 1000,
		"container_memory_cache []":                               300,
		"container_memory_mapped_file []":                         40,
		"container_memory_kernel_usage []":                        50,
		"container_memory_swap []":                                60,
		"container_memory_max_usage_bytes []":                     3000,
		"container_memory_failcnt []":                             4,
		"container_memory_failures_total [pgfault container]":     70,
		"container_memory_failures_total [pgmajfault hierarchy]":  2,
		"container_oom_events_total []":                           1,
		"container_processes []":                                  2,
		"container_threads []":                                    9,
		"container_threads_max []":                                100,
		"container_file_descriptors []":                           12,
		"container_sockets []":                                    3,
		"container_fs_usage_bytes []":                             555,
		"container_fs_limit_bytes []":                             4096000,
		"container_fs_inodes_total []":                            500,
		"container_fs_inodes_free []":                             200,
		"container_fs_reads_bytes_total [/dev/8-0]":               4096,
		"container_fs_writes_total [/dev/8-0]":                    2,
		"container_blkio_device_usage_total [/dev/8-0 8 0 Write]": 8192,
		"container_spec_cpu_period []":                            100000,
		"container_spec_cpu_quota []":                             20000,
		"container_spec_cpu_shares []":                            1024,
		"container_spec_memory_limit_bytes []":                    1 << 26,
		"container_spec_memory_swap_limit_bytes []":               1 << 27,
		"container_start_time_seconds []":                         1700000000,
		"container_network_receive_bytes_total [eth0]":            1,
		"container_network_receive_bytes_total [net1]":            10,
		"container_network_receive_errors_total [eth0]":           2,
		"container_network_transmit_bytes_total [eth0]":           3,
		"container_network_transmit_errors_total [eth0]":          4,
		"container_network_receive_packets_total [eth0]":          5,
		"container_network_transmit_packets_total [eth0]":         6,
		"container_network_receive_packets_dropped_total [eth0]":  7,
		"container_network_transmit_packets_dropped_total [eth0]": 8,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %d (present %v), want %d", key, v, ok, want)
		}
	}
}

// TestComputeMetricsUnknowns: what is not known is left out, not reported as zero: a
// layer not measured yet, the image filesystem not read, no CPU quota, no network.
func TestComputeMetricsUnknowns(t *testing.T) {
	groups, _ := metricsServer("all").includedMetrics()
	in := fakeMetricInput()
	in.layer, in.fs, in.res, in.ifs = nil, nil, nil, nil
	for _, pod := range []bool{false, true} {
		for _, m := range computeMetrics(groups, pod, []string{"a", "b", "c", "d", "e"}, in) {
			switch m.GetName() {
			case "container_fs_usage_bytes", "container_fs_limit_bytes", "container_fs_inodes_total", "container_fs_inodes_free",
				"container_spec_cpu_quota":
				t.Errorf("%s reported without a figure", m.GetName())
			}
			if pod {
				t.Errorf("pod metric %s without interfaces", m.GetName())
			}
		}
	}
}

func TestIncludedMetricsParts(t *testing.T) {
	for _, tt := range []struct {
		groups []string
		want   oci.MetricParts
	}{
		{[]string{}, 0},
		{[]string{"spec", "disk", "network"}, 0}, // no cgroup read at all
		{[]string{"cpu"}, oci.MetricCPU},
		{[]string{"oom", "memory"}, oci.MetricMemory},
		{[]string{"all"}, oci.MetricCPU | oci.MetricMemory | oci.MetricProcess | oci.MetricIO},
	} {
		if _, got := metricsServer(tt.groups...).includedMetrics(); got != tt.want {
			t.Errorf("parts of %q = %b, want %b", tt.groups, got, tt.want)
		}
	}
}

// TestMetricGroupsAreTheConfigs: every group the configuration accepts is implemented.
func TestMetricGroupsAreTheConfigs(t *testing.T) {
	for _, g := range config.PodMetricGroups {
		if mg, ok := metricGroups[g]; !ok || mg.name != g {
			t.Errorf("group %q of config.PodMetricGroups not implemented", g)
		}
	}
	if len(metricGroups) != len(config.PodMetricGroups) {
		t.Errorf("%d groups implemented, config.PodMetricGroups has %d", len(metricGroups), len(config.PodMetricGroups))
	}
}

// TestComputeMetricsStatsTime: when the oci layer took a container's Stats figures from
// ListContainerStats' recent reading (metricInput.statsAt), exactly the metrics computed
// from them carry its time; the others stay 0 (read by the call), the layer's its own.
func TestComputeMetricsStatsTime(t *testing.T) {
	groups, _ := metricsServer("all").includedMetrics()
	fromStats := map[string]bool{
		"container_cpu_usage_seconds_total": true, "container_memory_cache": true, "container_memory_rss": true,
		"container_memory_kernel_usage": true, "container_memory_mapped_file": true, "container_memory_swap": true,
		"container_memory_usage_bytes": true, "container_memory_working_set_bytes": true,
		"container_memory_failures_total": true, "container_threads": true,
	}
	const layerAt = 1700000090e9
	for _, tt := range []struct {
		name    string
		statsAt int64
	}{
		{name: "read by the call", statsAt: 0},
		{name: "taken from a reading before", statsAt: 1700000099e9},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := fakeMetricInput()
			in.statsAt = tt.statsAt
			stamped := map[string]bool{}
			for _, m := range computeMetrics(groups, false, []string{"a", "b", "c", "d", "e"}, in) {
				want := int64(0)
				switch {
				case m.GetName() == "container_fs_usage_bytes":
					want = layerAt
				case fromStats[m.GetName()]:
					want = tt.statsAt
					stamped[m.GetName()] = true
				}
				if m.GetTimestamp() != want {
					t.Errorf("%s stamped %d, want %d", m.GetName(), m.GetTimestamp(), want)
				}
			}
			if len(stamped) != len(fromStats) {
				t.Errorf("metrics computed from Stats' figures: %v, want all of %v", stamped, fromStats)
			}
		})
	}
}
