package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
)

// The CRI metrics calls (ListMetricDescriptors, ListPodSandboxMetrics) report cAdvisor's
// container_* metrics, which the kubelet serves on /metrics/cadvisor when its
// PodAndContainerStatsFromCRI gate is on, by the groups that included_pod_metrics names.
// Names, help, label keys, units and types are CRI-O's (internal/lib/statsserver), so a
// dashboard made for CRI-O reads these the same: every metric has the label keys id,
// image, namespace, pod and container, and some a few more (cpu, interface, device,
// failure_type, scope, ...). A container's metrics are labelled with its ID, image (as
// requested), pod namespace, pod name and name; the pod's own (network) with the pod's
// ID, no image, and the container "POD".
//
// The figures come from where the stats calls get theirs: the container's cgroup (read
// by the OCI runtime layer, only the files of the groups asked for: oci.MetricParts),
// the pod's network namespace (one netlink dump per pod), the writable layer's figure of
// the background collector (stats_layers.go; no call walks a layer) and the recorded
// resources. Values are unsigned integers, as the CRI carries them: the *_seconds_total
// counters are whole seconds, as CRI-O reports them. A figure read by the call has no
// timestamp (the kubelet's "collected on demand"); the writable layer's carries the time
// it was measured, and so do the figures of a container's cgroup that the oci layer took
// from ListContainerStats' reading of less than a second before instead of reading them
// again (oci.CgroupMetrics.Shared: the metrics marked fromStats carry that reading's
// time). Only running containers of ready pods are reported.

// metricLabelKeys are the label keys every metric has (CRI-O's).
var metricLabelKeys = []string{"id", "image", "namespace", "pod", "container"}

// metricDef is one metric: its descriptor, and how to compute its values for a container
// (or, in the network group, for a pod).
type metricDef struct {
	name, help string
	labels     []string // label keys after metricLabelKeys
	kind       runtimeapi.MetricType
	values     func(in *metricInput) []metricValue
	// fromStats marks the metrics whose figures are those of oci's Stats (CPU time,
	// memory usage, working set, RSS, faults, threads) or of the memory.stat it reads
	// (cache, mapped files, v1's swap, v2's kernel memory): when the oci layer took them
	// from Stats' recent reading, their values carry its time (metricInput.statsAt).
	// The kernel memory and the swap are marked as memory.stat gives them on one cgroup
	// version; on the other, read from a file of their own by this call, they are then
	// stamped up to that second early.
	fromStats bool
}

// metricValue is one value of a metric: the values of its def's extra labels, and a
// timestamp (0: read by this call).
type metricValue struct {
	value  uint64
	labels []string
	at     int64
}

// metricInput is what a container's metrics (or a pod's, in the network group) are
// computed from. What a group does not need is left zero.
type metricInput struct {
	now     time.Time
	cg      oci.CgroupMetrics
	res     *runtimeapi.LinuxContainerResources
	created time.Time
	layer   *runtimeapi.FilesystemUsage // nil until the collector measured it
	fs      *unix.Statfs_t              // the image filesystem; nil when not read
	ifs     []netns.InterfaceStats
	device  func(major, minor uint64) string // the name of a block device
	// statsAt is when the figures of Stats in cg were read, when that was before this
	// call (cg.Shared), in Unix nanoseconds; 0 when this call read them.
	statsAt int64
}

// metricGroup is one group of included_pod_metrics.
type metricGroup struct {
	name  string
	parts oci.MetricParts // what it reads of the cgroup
	pod   bool            // its metrics are the pod's (network), not its containers'
	defs  []metricDef
}

// alwaysMetrics is the group reported whatever included_pod_metrics says (CRI-O's
// always-on metrics).
var alwaysMetrics = metricGroup{defs: []metricDef{
	gauge("container_last_seen", "Last time a container was seen by the exporter", func(in *metricInput) uint64 { return uint64(in.now.Unix()) }),
}}

// one returns a metric of one value, with no extra label.
func one(name, help string, kind runtimeapi.MetricType, value func(in *metricInput) uint64) metricDef {
	return metricDef{name: name, help: help, kind: kind, values: func(in *metricInput) []metricValue {
		return []metricValue{{value: value(in)}}
	}}
}

func gauge(name, help string, value func(in *metricInput) uint64) metricDef {
	return one(name, help, runtimeapi.MetricType_GAUGE, value)
}

func counter(name, help string, value func(in *metricInput) uint64) metricDef {
	return one(name, help, runtimeapi.MetricType_COUNTER, value)
}

// fromStats marks d as computed from the figures of oci's Stats (metricDef.fromStats).
func fromStats(d metricDef) metricDef {
	d.fromStats = true
	return d
}

// seconds converts nanoseconds to the whole seconds the *_seconds_total counters carry.
func seconds(ns uint64) uint64 { return ns / uint64(time.Second) }

// metricGroups are the groups of included_pod_metrics by name (config.PodMetricGroups).
var metricGroups = map[string]metricGroup{
	"cpu": {name: "cpu", parts: oci.MetricCPU, defs: []metricDef{
		counter("container_cpu_user_seconds_total", "Cumulative user CPU time consumed in seconds.",
			func(in *metricInput) uint64 { return seconds(in.cg.CPUUserNanos) }),
		counter("container_cpu_system_seconds_total", "Cumulative system CPU time consumed in seconds.",
			func(in *metricInput) uint64 { return seconds(in.cg.CPUSystemNanos) }),
		{name: "container_cpu_usage_seconds_total", help: "Cumulative CPU time consumed in seconds.", labels: []string{"cpu"},
			kind: runtimeapi.MetricType_COUNTER, fromStats: true, values: func(in *metricInput) []metricValue {
				return []metricValue{{value: seconds(in.cg.CPUUsageNanos), labels: []string{"total"}}}
			}},
		counter("container_cpu_cfs_periods_total", "Number of elapsed enforcement period intervals.",
			func(in *metricInput) uint64 { return in.cg.CFSPeriods }),
		counter("container_cpu_cfs_throttled_periods_total", "Number of throttled period intervals.",
			func(in *metricInput) uint64 { return in.cg.CFSThrottledPeriods }),
		counter("container_cpu_cfs_throttled_seconds_total", "Total time duration the container has been throttled.",
			func(in *metricInput) uint64 { return seconds(in.cg.CFSThrottledNanos) }),
	}},
	"disk": {name: "disk", defs: []metricDef{
		statfsGauge("container_fs_inodes_free", "Number of free inodes.", func(fs *unix.Statfs_t) uint64 { return fs.Ffree }),
		statfsGauge("container_fs_inodes_total", "Total number of inodes.", func(fs *unix.Statfs_t) uint64 { return fs.Files }),
		statfsGauge("container_fs_limit_bytes", "Filesystem limit in bytes.",
			func(fs *unix.Statfs_t) uint64 { return fs.Blocks * uint64(fs.Bsize) }),
		{name: "container_fs_usage_bytes", help: "Current filesystem usage in bytes.", kind: runtimeapi.MetricType_GAUGE,
			values: func(in *metricInput) []metricValue {
				if in.layer == nil {
					return nil
				}
				return []metricValue{{value: in.layer.GetUsedBytes().GetValue(), at: in.layer.GetTimestamp()}}
			}},
	}},
	"diskIO": {name: "diskIO", parts: oci.MetricIO, defs: []metricDef{
		deviceCounter("container_fs_reads_bytes_total", "Cumulative count of bytes read", func(d oci.DeviceIO) uint64 { return d.ReadBytes }),
		deviceCounter("container_fs_reads_total", "Cumulative count of reads completed", func(d oci.DeviceIO) uint64 { return d.Reads }),
		deviceCounter("container_fs_writes_bytes_total", "Cumulative count of bytes written", func(d oci.DeviceIO) uint64 { return d.WriteBytes }),
		deviceCounter("container_fs_writes_total", "Cumulative count of writes completed", func(d oci.DeviceIO) uint64 { return d.Writes }),
		{name: "container_blkio_device_usage_total", help: "Blkio Device bytes usage", labels: []string{"device", "major", "minor", "operation"},
			kind: runtimeapi.MetricType_COUNTER, values: func(in *metricInput) []metricValue {
				var out []metricValue
				for _, d := range in.cg.IO {
					dev, major, minor := in.device(d.Major, d.Minor), strconv.FormatUint(d.Major, 10), strconv.FormatUint(d.Minor, 10)
					out = append(out, metricValue{value: d.ReadBytes, labels: []string{dev, major, minor, "Read"}},
						metricValue{value: d.WriteBytes, labels: []string{dev, major, minor, "Write"}})
				}
				return out
			}},
	}},
	"memory": {name: "memory", parts: oci.MetricMemory, defs: []metricDef{
		fromStats(gauge("container_memory_cache", "Number of bytes of page cache memory.", func(in *metricInput) uint64 { return in.cg.MemoryCache })),
		fromStats(gauge("container_memory_rss", "Size of RSS in bytes.", func(in *metricInput) uint64 { return in.cg.RSS })),
		fromStats(gauge("container_memory_kernel_usage", "Size of kernel memory allocated in bytes.", func(in *metricInput) uint64 { return in.cg.MemoryKernel })),
		fromStats(gauge("container_memory_mapped_file", "Size of memory mapped files in bytes.", func(in *metricInput) uint64 { return in.cg.MemoryMappedFile })),
		fromStats(gauge("container_memory_swap", "Container swap usage in bytes.", func(in *metricInput) uint64 { return in.cg.MemorySwap })),
		counter("container_memory_failcnt", "Number of memory usage hits limits", func(in *metricInput) uint64 { return in.cg.MemoryFailcnt }),
		fromStats(gauge("container_memory_usage_bytes", "Current memory usage in bytes, including all memory regardless of when it was accessed",
			func(in *metricInput) uint64 { return in.cg.MemoryUsage })),
		gauge("container_memory_max_usage_bytes", "Maximum memory usage recorded in bytes", func(in *metricInput) uint64 { return in.cg.MemoryMaxUsage }),
		fromStats(gauge("container_memory_working_set_bytes", "Current working set in bytes.", func(in *metricInput) uint64 { return in.cg.MemoryWorkingSet })),
		{name: "container_memory_failures_total", help: "Cumulative count of memory allocation failures.", labels: []string{"failure_type", "scope"},
			kind: runtimeapi.MetricType_COUNTER, fromStats: true, values: func(in *metricInput) []metricValue {
				// The cgroup's counts include its children's: the same for both scopes.
				return []metricValue{
					{value: in.cg.PageFaults, labels: []string{"pgfault", "container"}},
					{value: in.cg.PageFaults, labels: []string{"pgfault", "hierarchy"}},
					{value: in.cg.MajorPageFaults, labels: []string{"pgmajfault", "container"}},
					{value: in.cg.MajorPageFaults, labels: []string{"pgmajfault", "hierarchy"}},
				}
			}},
	}},
	"network": {name: "network", pod: true, defs: []metricDef{
		interfaceCounter("container_network_receive_bytes_total", "Cumulative count of bytes received", func(i netns.InterfaceStats) uint64 { return i.RxBytes }),
		interfaceCounter("container_network_receive_packets_total", "Cumulative count of packets received", func(i netns.InterfaceStats) uint64 { return i.RxPackets }),
		interfaceCounter("container_network_receive_packets_dropped_total", "Cumulative count of packets dropped while receiving",
			func(i netns.InterfaceStats) uint64 { return i.RxDropped }),
		interfaceCounter("container_network_receive_errors_total", "Cumulative count of errors encountered while receiving",
			func(i netns.InterfaceStats) uint64 { return i.RxErrors }),
		interfaceCounter("container_network_transmit_bytes_total", "Cumulative count of bytes transmitted", func(i netns.InterfaceStats) uint64 { return i.TxBytes }),
		interfaceCounter("container_network_transmit_packets_total", "Cumulative count of packets transmitted", func(i netns.InterfaceStats) uint64 { return i.TxPackets }),
		interfaceCounter("container_network_transmit_packets_dropped_total", "Cumulative count of packets dropped while transmitting",
			func(i netns.InterfaceStats) uint64 { return i.TxDropped }),
		interfaceCounter("container_network_transmit_errors_total", "Cumulative count of errors encountered while transmitting",
			func(i netns.InterfaceStats) uint64 { return i.TxErrors }),
	}},
	"oom": {name: "oom", parts: oci.MetricMemory, defs: []metricDef{
		counter("container_oom_events_total", "Count of out of memory events observed for the container", func(in *metricInput) uint64 { return in.cg.OOMKills }),
	}},
	"process": {name: "process", parts: oci.MetricProcess, defs: []metricDef{
		gauge("container_file_descriptors", "Number of open file descriptors for the container.", func(in *metricInput) uint64 { return in.cg.FileDescriptors }),
		gauge("container_processes", "Number of processes running inside the container.", func(in *metricInput) uint64 { return in.cg.ProcessCount }),
		gauge("container_sockets", "Number of open sockets for the container.", func(in *metricInput) uint64 { return in.cg.Sockets }),
		fromStats(gauge("container_threads", "Number of threads running inside the container", func(in *metricInput) uint64 { return in.cg.Processes })),
		gauge("container_threads_max", "Maximum number of threads allowed inside the container, infinity if value is zero",
			func(in *metricInput) uint64 { return in.cg.ThreadsMax }),
	}},
	"spec": {name: "spec", defs: []metricDef{
		gauge("container_spec_cpu_period", "CPU period of the container.", func(in *metricInput) uint64 { return uint64(max(in.res.GetCpuPeriod(), 0)) }),
		gauge("container_spec_cpu_shares", "CPU share of the container.", func(in *metricInput) uint64 { return uint64(max(in.res.GetCpuShares(), 0)) }),
		{name: "container_spec_cpu_quota", help: "CPU quota of the container.", kind: runtimeapi.MetricType_GAUGE,
			values: func(in *metricInput) []metricValue {
				if q := in.res.GetCpuQuota(); q > 0 { // none without a quota, as cAdvisor
					return []metricValue{{value: uint64(q)}}
				}
				return nil
			}},
		gauge("container_spec_memory_limit_bytes", "Memory limit for the container in bytes.",
			func(in *metricInput) uint64 { return uint64(max(in.res.GetMemoryLimitInBytes(), 0)) }),
		gauge("container_spec_memory_swap_limit_bytes", "Memory swap limit for the container.",
			func(in *metricInput) uint64 { return uint64(max(in.res.GetMemorySwapLimitInBytes(), 0)) }),
		gauge("container_start_time_seconds", "Start time of the container since unix epoch in seconds.",
			func(in *metricInput) uint64 { return uint64(max(in.created.Unix(), 0)) }),
	}},
}

func statfsGauge(name, help string, value func(fs *unix.Statfs_t) uint64) metricDef {
	return metricDef{name: name, help: help, kind: runtimeapi.MetricType_GAUGE, values: func(in *metricInput) []metricValue {
		if in.fs == nil {
			return nil
		}
		return []metricValue{{value: value(in.fs)}}
	}}
}

func deviceCounter(name, help string, value func(d oci.DeviceIO) uint64) metricDef {
	return metricDef{name: name, help: help, labels: []string{"device"}, kind: runtimeapi.MetricType_COUNTER,
		values: func(in *metricInput) []metricValue {
			out := make([]metricValue, 0, len(in.cg.IO))
			for _, d := range in.cg.IO {
				out = append(out, metricValue{value: value(d), labels: []string{in.device(d.Major, d.Minor)}})
			}
			return out
		}}
}

func interfaceCounter(name, help string, value func(i netns.InterfaceStats) uint64) metricDef {
	return metricDef{name: name, help: help, labels: []string{"interface"}, kind: runtimeapi.MetricType_COUNTER,
		values: func(in *metricInput) []metricValue {
			out := make([]metricValue, 0, len(in.ifs))
			for _, i := range in.ifs {
				out = append(out, metricValue{value: value(i), labels: []string{i.Name}})
			}
			return out
		}}
}

// includedMetrics returns the groups to report: the always-on one, then those of
// included_pod_metrics (which Validate checked), and what they read of the cgroups.
func (s *Server) includedMetrics() ([]metricGroup, oci.MetricParts) {
	groups := []metricGroup{alwaysMetrics}
	var parts oci.MetricParts
	for _, name := range s.cfg.PodMetrics() {
		if g, ok := metricGroups[name]; ok {
			groups = append(groups, g)
			parts |= g.parts
		}
	}
	return groups, parts
}

// wants reports whether groups hold the group called name.
func wants(groups []metricGroup, name string) bool {
	for _, g := range groups {
		if g.name == name {
			return true
		}
	}
	return false
}

// ListMetricDescriptors describes the metrics ListPodSandboxMetrics reports.
func (s *Server) ListMetricDescriptors(ctx context.Context, req *runtimeapi.ListMetricDescriptorsRequest) (*runtimeapi.ListMetricDescriptorsResponse, error) {
	groups, _ := s.includedMetrics()
	resp := &runtimeapi.ListMetricDescriptorsResponse{}
	for _, g := range groups {
		for _, d := range g.defs {
			resp.Descriptors = append(resp.Descriptors, &runtimeapi.MetricDescriptor{
				Name: d.name, Help: d.help, LabelKeys: append(append([]string(nil), metricLabelKeys...), d.labels...),
			})
		}
	}
	return resp, nil
}

// ListPodSandboxMetrics reports the metrics of every ready pod and of its running
// containers. A container whose cgroup cannot be read is left out and logged, as in
// ListContainerStats.
func (s *Server) ListPodSandboxMetrics(ctx context.Context, req *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	resp := &runtimeapi.ListPodSandboxMetricsResponse{}
	err := s.eachPodSandboxMetrics(ctx, func(m *runtimeapi.PodSandboxMetrics) error {
		resp.PodMetrics = append(resp.PodMetrics, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// eachPodSandboxMetrics hands emit, in turn, the metrics of each ready pod, as it reads
// them (see eachPodSandbox); an error from emit stops it.
func (s *Server) eachPodSandboxMetrics(ctx context.Context, emit func(*runtimeapi.PodSandboxMetrics) error) error {
	groups, parts := s.includedMetrics()
	now := time.Now()
	shared := metricInput{now: now, device: blockDeviceName}
	if wants(groups, "disk") && s.images != nil {
		var st unix.Statfs_t
		if err := unix.Statfs(s.images.GraphRoot(), &st); err != nil {
			s.log.Warn("image filesystem not readable for the disk metrics", "path", s.images.GraphRoot(), "err", err)
		} else {
			shared.fs = &st
		}
	}
	// The records are the journal's shared ones (journal.Snapshot), only read here: a
	// deep copy of every record at every scrape was a third of what the call allocated.
	byPod := map[string][]journal.Record{}
	for _, r := range s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindContainer && r.State == journal.StateCreated
	}) {
		byPod[r.Parent] = append(byPod[r.Parent], r)
	}
	for _, rec := range s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindSandbox && r.State == journal.StateCreated
	}) {
		if err := ctx.Err(); err != nil {
			return err
		}
		sb, err := s.listedSandbox(rec)
		if err != nil {
			s.log.Warn("skipping undecodable sandbox", "id", rec.ID, "name", rec.Name, "err", err)
			continue
		}
		if sb.state() != runtimeapi.PodSandboxState_SANDBOX_READY {
			continue
		}
		if err := emit(s.podMetrics(sb, byPod[sb.rec.ID], groups, parts, shared)); err != nil {
			return err
		}
	}
	return nil
}

// podMetrics computes the metrics of one pod and of its running containers.
func (s *Server) podMetrics(sb sandbox, recs []journal.Record, groups []metricGroup, parts oci.MetricParts, shared metricInput) *runtimeapi.PodSandboxMetrics {
	md := sb.config.GetMetadata()
	pm := &runtimeapi.PodSandboxMetrics{PodSandboxId: sb.rec.ID}
	if path := sb.obj.Namespaces[string(netns.Net)]; path != "" && wants(groups, "network") {
		in := shared
		ifs, err := netns.Interfaces(path)
		if err != nil {
			s.log.Warn("pod network not readable for its metrics", "id", sb.rec.ID, "name", sb.rec.Name, "err", err)
		}
		in.ifs = ifs
		pm.Metrics = computeMetrics(groups, true, []string{sb.rec.ID, "", md.GetNamespace(), md.GetName(), "POD"}, &in)
	}
	for _, rec := range recs {
		c, err := s.listedContainer(rec)
		if err != nil {
			s.log.Warn("skipping undecodable container", "id", rec.ID, "name", rec.Name, "err", err)
			continue
		}
		if c.state() != runtimeapi.ContainerState_CONTAINER_RUNNING {
			continue
		}
		in, err := s.containerMetricInput(c, parts, shared)
		if err != nil {
			s.log.Warn("container metrics not readable", "id", c.rec.ID, "name", c.rec.Name, "err", err)
			continue
		}
		labels := []string{c.rec.ID, c.obj.Image, md.GetNamespace(), md.GetName(), c.config.GetMetadata().GetName()}
		pm.ContainerMetrics = append(pm.ContainerMetrics, &runtimeapi.ContainerMetrics{
			ContainerId: c.rec.ID, Metrics: computeMetrics(groups, false, labels, &in),
		})
	}
	return pm
}

// containerMetricInput reads what a container's metrics need: its cgroup's parts (none
// when no group asks for them), its resources, its writable layer's last figure.
func (s *Server) containerMetricInput(c container, parts oci.MetricParts, shared metricInput) (metricInput, error) {
	in := shared
	in.res, in.created = c.resources().GetLinux(), c.obj.CreatedAt
	if parts != 0 && s.runtimes != nil {
		rt, err := s.runtimes.Runtime(c.obj.Handler)
		if err != nil {
			return in, err
		}
		cg, err := rt.Metrics(c.rec.ID, parts)
		if errors.Is(err, oci.ErrNoCgroup) {
			cg, err = oci.CgroupMetrics{}, nil // created by the runtime but its record lost: nothing runs in it
		}
		if err != nil {
			return in, err
		}
		in.cg = cg
		if cg.Shared {
			in.statsAt = cg.Timestamp.UnixNano()
		}
	}
	if shared.fs != nil { // the disk group
		if layer, err := s.writableLayer(c.rec.ID); err == nil {
			in.layer = layer
		}
	}
	return in, nil
}

// computeMetrics computes the metrics of groups (the pod's, or a container's) for the
// labels given (the values of metricLabelKeys).
func computeMetrics(groups []metricGroup, pod bool, labels []string, in *metricInput) []*runtimeapi.Metric {
	var out []*runtimeapi.Metric
	for _, g := range groups {
		if g.pod != pod {
			continue
		}
		for _, d := range g.defs {
			for _, v := range d.values(in) {
				lv := labels
				if len(v.labels) > 0 {
					lv = append(append(make([]string, 0, len(labels)+len(v.labels)), labels...), v.labels...)
				}
				at := v.at
				if at == 0 && d.fromStats {
					at = in.statsAt
				}
				out = append(out, &runtimeapi.Metric{
					Name: d.name, Timestamp: at, MetricType: d.kind, LabelValues: lv, Value: &runtimeapi.UInt64Value{Value: v.value},
				})
			}
		}
	}
	return out
}

// blockDevices caches the names of block devices ("/dev/sda") by "major:minor".
var blockDevices sync.Map

// blockDeviceName returns the /dev name of a block device, as cAdvisor labels I/O; the
// "major:minor" pair when sysfs does not say.
func blockDeviceName(major, minor uint64) string {
	key := fmt.Sprintf("%d:%d", major, minor)
	if name, ok := blockDevices.Load(key); ok {
		return name.(string)
	}
	name := key
	if uevent, err := os.ReadFile("/sys/dev/block/" + key + "/uevent"); err == nil {
		for line := range strings.Lines(string(uevent)) {
			if dev, ok := strings.CutPrefix(strings.TrimSpace(line), "DEVNAME="); ok {
				name = "/dev/" + dev
			}
		}
	}
	blockDevices.Store(key, name)
	return name
}
