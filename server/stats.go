package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
)

// The stats calls (ContainerStats, ListContainerStats, PodSandboxStats,
// ListPodSandboxStats) answer from the journal's index, the containers' cgroups (through
// the OCI runtime, which knows each cgroup from what it recorded at create), the usage of
// the writable layers that a background pass measures every stats_collect_period
// (stats_layers.go) and the pods' network namespaces. None of them starts a process or
// walks a layer: the kubelet asks for every container every ~10 s.

// statsState is what the stats calls keep between calls: the previous CPU sample of each
// cgroup they report a rate of (for usage_nano_cores). The writable layers' usage is kept
// apart, by the layerCollector that measures it in the background (stats_layers.go).
type statsState struct {
	mu  sync.Mutex
	cpu map[cpuKey]cpuSample
}

// cpuKey names a cgroup whose CPU rate the stats calls follow: a container's or a pod's
// own (part ""), or one beside a pod's containers that the pod's figures count: its
// pause process's (partPause, of the pod's ID) or a container's conmon's (partConmon, of
// the container's ID).
type cpuKey struct {
	id, part string
}

const (
	partPause  = "pause"
	partConmon = "conmon"
)

type cpuSample struct {
	at    time.Time
	usage uint64
}

// nanoCores returns the CPU rate of k since its previous sample, in nano cores, and
// records this one; 0 when there is no earlier sample.
func (st *statsState) nanoCores(k cpuKey, at time.Time, usage uint64) uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	prev, ok := st.cpu[k]
	if st.cpu == nil {
		st.cpu = map[cpuKey]cpuSample{}
	}
	st.cpu[k] = cpuSample{at: at, usage: usage}
	d := at.Sub(prev.at)
	if !ok || d <= 0 || usage < prev.usage {
		return 0
	}
	return uint64(float64(usage-prev.usage) / d.Seconds())
}

// prune forgets the cgroups of every container and pod that is not in live.
func (st *statsState) prune(live map[string]bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for k := range st.cpu {
		if !live[k.id] {
			delete(st.cpu, k)
		}
	}
}

// StartStatsCollection starts measuring the containers' writable layers in the
// background, one after another, every stats_collect_period, until Close (see
// layerCollector). Without storage it does nothing. Call it at most once.
func (s *Server) StartStatsCollection() {
	if s.layers == nil {
		return
	}
	period := s.cfg.StatsCollectPeriod
	if period <= 0 {
		period = config.Default().StatsCollectPeriod
	}
	s.layers.idleRewalk = idleRewalkPasses * period
	s.collected = make(chan struct{})
	go func() {
		defer close(s.collected)
		s.layers.run(s.lifetime, period)
	}()
}

// idleRewalkPasses: the layer of a container idle since its last walk is walked again
// every this many passes of the collector (a minute, at the default period).
const idleRewalkPasses = 6

// containerCPU is the collector's busy: the CPU time of container id's cgroup.
func (s *Server) containerCPU(id string) (uint64, bool) {
	if s.runtimes == nil {
		return 0, false
	}
	c, err := s.viewContainer(id)
	if err != nil {
		return 0, false
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return 0, false
	}
	cpu, err := rt.CPUUsage(id)
	return cpu, err == nil
}

// createdContainerIDs returns the IDs of the created containers: those whose layers the
// collector measures.
func (s *Server) createdContainerIDs() []string {
	recs := s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindContainer && r.State == journal.StateCreated
	})
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

// ContainerStats reports one container's resource usage.
func (s *Server) ContainerStats(ctx context.Context, req *runtimeapi.ContainerStatsRequest) (*runtimeapi.ContainerStatsResponse, error) {
	if s.runtimes == nil {
		return nil, errNoStats
	}
	c, err := s.findContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	st, err := s.containerStats(c)
	if err != nil {
		return nil, err
	}
	return &runtimeapi.ContainerStatsResponse{Stats: st}, nil
}

// ListContainerStats reports the resource usage of the created containers that pass the
// filter (ID prefix, sandbox ID prefix, labels). A container whose figures cannot be read
// is left out and logged, so that one broken container does not blind the kubelet to the
// others.
func (s *Server) ListContainerStats(ctx context.Context, req *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	resp := &runtimeapi.ListContainerStatsResponse{}
	err := s.eachContainerStats(ctx, req.GetFilter(), func(st *runtimeapi.ContainerStats) error {
		resp.Stats = append(resp.Stats, st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// eachContainerStats hands emit, in turn, the stats of each created container that
// passes the filter, as it reads them (see eachPodSandbox); an error from emit stops it.
func (s *Server) eachContainerStats(ctx context.Context, f *runtimeapi.ContainerStatsFilter, emit func(*runtimeapi.ContainerStats) error) error {
	if s.runtimes == nil {
		return errNoStats
	}
	cs := s.statsContainers(f.GetId(), f.GetPodSandboxId(), f.GetLabelSelector())
	for _, c := range cs {
		if err := ctx.Err(); err != nil {
			return err
		}
		st, err := s.containerStats(c)
		if err != nil {
			s.log.Warn("container stats not readable", "id", c.rec.ID, "name", c.rec.Name, "err", err)
			continue
		}
		if err := emit(st); err != nil {
			return err
		}
	}
	if f.GetId() == "" && f.GetPodSandboxId() == "" && len(f.GetLabelSelector()) == 0 {
		s.forgetStats() // a full listing sees every live container
	}
	return nil
}

// statsContainers returns the created containers whose ID starts with id, whose sandbox ID
// starts with sandboxID and whose labels hold selector. They are the journal's published
// records and, where the List calls cached them, their decoded objects (journal.Snapshot,
// decodeCache.view): read them, never change them.
func (s *Server) statsContainers(id, sandboxID string, selector map[string]string) []container {
	recs := s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindContainer && r.State == journal.StateCreated &&
			strings.HasPrefix(r.ID, id) && strings.HasPrefix(r.Parent, sandboxID)
	})
	var out []container
	for _, rec := range recs {
		c, err := s.containerCache.view(rec, decodeContainer)
		c.rec = rec
		if err != nil {
			s.log.Warn("skipping undecodable container", "id", rec.ID, "name", rec.Name, "err", err)
			continue
		}
		if labelsMatch(c.config.GetLabels(), selector) {
			out = append(out, c)
		}
	}
	return out
}

// forgetStats drops what the stats calls keep of containers and pods that are gone.
func (s *Server) forgetStats() {
	live := map[string]bool{}
	for _, r := range s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindContainer || r.Kind == journal.KindSandbox
	}) {
		live[r.ID] = true
	}
	s.stats.prune(live)
}

// containerStats reads one container's cgroup and writable layer.
func (s *Server) containerStats(c container) (*runtimeapi.ContainerStats, error) {
	st, _, err := s.readContainerStats(c)
	return st, err
}

// readContainerStats is containerStats, which also returns the number of processes in
// the container's cgroup (for the pod's process count).
func (s *Server) readContainerStats(c container) (*runtimeapi.ContainerStats, uint64, error) {
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return nil, 0, err
	}
	cg, err := rt.Stats(c.rec.ID)
	if errors.Is(err, oci.ErrNoCgroup) {
		// Created by the runtime but its record lost (a reboot): nothing runs in it.
		cg, err = oci.CgroupStats{Timestamp: time.Now()}, nil
	}
	if err != nil {
		return nil, 0, err
	}
	ts := cg.Timestamp.UnixNano()
	st := &runtimeapi.ContainerStats{
		Attributes: &runtimeapi.ContainerAttributes{
			Id: c.rec.ID, Metadata: c.config.GetMetadata(), Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(),
		},
		Cpu: &runtimeapi.CpuUsage{
			Timestamp:            ts,
			UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: cg.CPUUsageNanos},
			UsageNanoCores:       &runtimeapi.UInt64Value{Value: s.stats.nanoCores(cpuKey{id: c.rec.ID}, cg.Timestamp, cg.CPUUsageNanos)},
			Psi:                  psiStats(cg.PSI.CPU),
		},
		Memory: memoryUsage(cg),
	}
	if cg.PSI.IO != nil {
		st.Io = &runtimeapi.IoUsage{Timestamp: ts, Psi: psiStats(cg.PSI.IO)}
	}
	st.Swap = swapUsage(ts, cg.Swap)
	if layer, err := s.writableLayer(c.rec.ID); err != nil {
		s.log.Debug("writable layer not measured", "id", c.rec.ID, "err", err)
	} else {
		st.WritableLayer = layer
	}
	return st, cg.Processes, nil
}

func memoryUsage(cg oci.CgroupStats) *runtimeapi.MemoryUsage {
	m := &runtimeapi.MemoryUsage{
		Timestamp:       cg.Timestamp.UnixNano(),
		WorkingSetBytes: &runtimeapi.UInt64Value{Value: cg.MemoryWorkingSet},
		UsageBytes:      &runtimeapi.UInt64Value{Value: cg.MemoryUsage},
		RssBytes:        &runtimeapi.UInt64Value{Value: cg.RSS},
		PageFaults:      &runtimeapi.UInt64Value{Value: cg.PageFaults},
		MajorPageFaults: &runtimeapi.UInt64Value{Value: cg.MajorPageFaults},
		Psi:             psiStats(cg.PSI.Memory),
	}
	if cg.MemoryLimit > 0 {
		avail := uint64(0)
		if cg.MemoryLimit > cg.MemoryWorkingSet {
			avail = cg.MemoryLimit - cg.MemoryWorkingSet
		}
		m.AvailableBytes = &runtimeapi.UInt64Value{Value: avail}
	}
	return m
}

// swapUsage is the CRI's form of a cgroup's swap; nil (left out) where the cgroup has
// no swap accounting. swap_available_bytes is left out without a swap limit.
func swapUsage(ts int64, sw *oci.Swap) *runtimeapi.SwapUsage {
	if sw == nil {
		return nil
	}
	u := &runtimeapi.SwapUsage{Timestamp: ts, SwapUsageBytes: &runtimeapi.UInt64Value{Value: sw.Usage}}
	if avail, ok := sw.Available(); ok {
		u.SwapAvailableBytes = &runtimeapi.UInt64Value{Value: avail}
	}
	return u
}

// psiStats is the CRI's form of a cgroup's pressure figures for one resource; nil
// (left out) where the cgroup has none (cgroup v1). The kernel counts the total stall in
// microseconds, the CRI in nanoseconds.
func psiStats(p *cgroups.PSIStats) *runtimeapi.PsiStats {
	if p == nil {
		return nil
	}
	data := func(d cgroups.PSIData) *runtimeapi.PsiData {
		return &runtimeapi.PsiData{Total: d.Total * 1000, Avg10: d.Avg10, Avg60: d.Avg60, Avg300: d.Avg300}
	}
	return &runtimeapi.PsiStats{Some: data(p.Some), Full: data(p.Full)}
}

// writableLayer reports what a container has written over its image, as the collector
// last measured it, stamped with the time it did. errNotMeasured until it has.
func (s *Server) writableLayer(id string) (*runtimeapi.FilesystemUsage, error) {
	if s.layers == nil {
		return nil, errors.New("no storage")
	}
	u, at, ok := s.layers.usage(id)
	if !ok {
		return nil, errNotMeasured
	}
	return &runtimeapi.FilesystemUsage{
		Timestamp: at.UnixNano(),
		// The filesystem is named as ImageFsInfo names it (as containerd does), so
		// the kubelet counts writable layers against the same filesystem.
		FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: s.images.GraphRoot()},
		UsedBytes:  &runtimeapi.UInt64Value{Value: u.UsedBytes},
		InodesUsed: &runtimeapi.UInt64Value{Value: u.InodesUsed},
	}, nil
}

// errNotMeasured is writableLayer's answer for a container the collector has not
// measured yet: its stats leave the writable layer out.
var errNotMeasured = errors.New("writable layer not measured yet")

// PodSandboxStats reports a pod's resource usage: its own cgroup's (see podStats), with
// its containers', and its network namespace's interface counters.
func (s *Server) PodSandboxStats(ctx context.Context, req *runtimeapi.PodSandboxStatsRequest) (*runtimeapi.PodSandboxStatsResponse, error) {
	sb, err := s.findSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	return &runtimeapi.PodSandboxStatsResponse{Stats: s.podStats(ctx, sb, s.podCgroupParents())}, nil
}

// ListPodSandboxStats reports the resource usage of the created pods that pass the filter
// (ID prefix, labels).
func (s *Server) ListPodSandboxStats(ctx context.Context, req *runtimeapi.ListPodSandboxStatsRequest) (*runtimeapi.ListPodSandboxStatsResponse, error) {
	resp := &runtimeapi.ListPodSandboxStatsResponse{}
	err := s.eachPodSandboxStats(ctx, req.GetFilter(), func(st *runtimeapi.PodSandboxStats) error {
		resp.Stats = append(resp.Stats, st)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// eachPodSandboxStats hands emit, in turn, the stats of each created pod that passes
// the filter, as it reads them (see eachPodSandbox); an error from emit stops it.
func (s *Server) eachPodSandboxStats(ctx context.Context, f *runtimeapi.PodSandboxStatsFilter, emit func(*runtimeapi.PodSandboxStats) error) error {
	recs := s.journal.List(func(r *journal.Record) bool {
		return r.Kind == journal.KindSandbox && r.State == journal.StateCreated && strings.HasPrefix(r.ID, f.GetId())
	})
	parents := s.podCgroupParents()
	for _, rec := range recs {
		if err := ctx.Err(); err != nil {
			return err
		}
		sb, err := decodeSandbox(rec)
		if err != nil {
			s.log.Warn("skipping undecodable sandbox", "id", rec.ID, "name", rec.Name, "err", err)
			continue
		}
		if !labelsMatch(sb.config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		if err := emit(s.podStats(ctx, sb, parents)); err != nil {
			return err
		}
	}
	return nil
}

// podCgroupParents counts the created pods by cgroup_parent.
func (s *Server) podCgroupParents() map[string]int {
	n := map[string]int{}
	for _, rec := range s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindSandbox && r.State == journal.StateCreated
	}) {
		if sb, err := s.sandboxCache.view(rec, decodeSandbox); err == nil {
			n[sb.config.GetLinux().GetCgroupParent()]++
		}
	}
	return n
}

// ownPodCgroup reports whether parent, a pod's cgroup_parent, is the pod's alone: set,
// and neither another created pod's (parents counts them, the pod included) nor above
// another's.
func ownPodCgroup(parent string, parents map[string]int) bool {
	if parent == "" || parents[parent] > 1 {
		return false
	}
	for p := range parents {
		if strings.HasPrefix(p, strings.TrimSuffix(parent, "/")+"/") {
			return false
		}
	}
	return true
}

// podStats reads a pod's cgroup, its containers' and its network namespace; parents
// counts the created pods by cgroup_parent (podCgroupParents).
func (s *Server) podStats(ctx context.Context, sb sandbox, parents map[string]int) *runtimeapi.PodSandboxStats {
	now := time.Now().UnixNano()
	cpu := &runtimeapi.CpuUsage{Timestamp: now, UsageCoreNanoSeconds: &runtimeapi.UInt64Value{}, UsageNanoCores: &runtimeapi.UInt64Value{}}
	mem := &runtimeapi.MemoryUsage{
		Timestamp: now, WorkingSetBytes: &runtimeapi.UInt64Value{}, UsageBytes: &runtimeapi.UInt64Value{},
		RssBytes: &runtimeapi.UInt64Value{}, PageFaults: &runtimeapi.UInt64Value{}, MajorPageFaults: &runtimeapi.UInt64Value{},
	}
	procs := uint64(0)
	linux := &runtimeapi.LinuxPodSandboxStats{Cpu: cpu, Memory: mem}
	var read []container // the containers whose stats were read
	if s.runtimes != nil {
		for _, c := range s.statsContainers("", sb.rec.ID, nil) {
			if ctx.Err() != nil {
				break
			}
			st, n, err := s.readContainerStats(c)
			if err != nil {
				s.log.Warn("container stats not readable", "id", c.rec.ID, "name", c.rec.Name, "err", err)
				continue
			}
			procs += n
			read = append(read, c)
			linux.Containers = append(linux.Containers, st)
			cpu.UsageCoreNanoSeconds.Value += st.GetCpu().GetUsageCoreNanoSeconds().GetValue()
			cpu.UsageNanoCores.Value += st.GetCpu().GetUsageNanoCores().GetValue()
			mem.WorkingSetBytes.Value += st.GetMemory().GetWorkingSetBytes().GetValue()
			mem.UsageBytes.Value += st.GetMemory().GetUsageBytes().GetValue()
			mem.RssBytes.Value += st.GetMemory().GetRssBytes().GetValue()
			mem.PageFaults.Value += st.GetMemory().GetPageFaults().GetValue()
			mem.MajorPageFaults.Value += st.GetMemory().GetMajorPageFaults().GetValue()
		}
	}
	// With a cgroup of its own (its cgroup_parent, as the kubelet gives every pod), the
	// pod's CPU, memory and process count are that cgroup's, as containerd reports them:
	// they count the pause process and the containers' conmons beside the containers, and
	// the pod's memory limit gives available_bytes. Without one (no cgroup_parent, or one
	// that other pods share) they are the sums of its containers', its pause process's and
	// its conmons' cgroups (addPodProcesses), with no available_bytes.
	own := false
	if parent := sb.config.GetLinux().GetCgroupParent(); ownPodCgroup(parent, parents) {
		if pod, err := oci.PodStats(parent, s.cfg.SystemdCgroup()); err != nil {
			s.log.Warn("pod cgroup stats not readable: the pod's figures are sums", "id", sb.rec.ID, "name", sb.rec.Name, "err", err)
		} else {
			ts := pod.Timestamp.UnixNano()
			cpu.Timestamp, cpu.UsageCoreNanoSeconds.Value = ts, pod.CPUUsageNanos
			cpu.UsageNanoCores.Value = s.stats.nanoCores(cpuKey{id: sb.rec.ID}, pod.Timestamp, pod.CPUUsageNanos)
			mem = memoryUsage(pod)
			linux.Memory, procs = mem, pod.Processes
			own = true
		}
	}
	if !own && s.runtimes != nil {
		procs += s.addPodProcesses(sb, read, cpu, mem)
	}
	linux.Process = &runtimeapi.ProcessUsage{Timestamp: now, ProcessCount: &runtimeapi.UInt64Value{Value: procs}}
	// Pressure is the pod cgroup's own (cgroup v2): stalls of its containers do not add up.
	if psi, err := oci.PodPSI(sb.config.GetLinux().GetCgroupParent(), s.cfg.SystemdCgroup()); err != nil {
		s.log.Warn("pod pressure not readable", "id", sb.rec.ID, "name", sb.rec.Name, "err", err)
	} else {
		cpu.Psi, mem.Psi = psiStats(psi.CPU), psiStats(psi.Memory)
		if psi.IO != nil {
			linux.Io = &runtimeapi.IoUsage{Timestamp: now, Psi: psiStats(psi.IO)}
		}
	}
	// A stopped pod's network is torn down: it has no counters to report.
	if path := sb.obj.Namespaces[string(netns.Net)]; path != "" && sb.state() == runtimeapi.PodSandboxState_SANDBOX_READY {
		ifs, err := netns.Interfaces(path)
		if err != nil {
			s.log.Warn("pod network stats not readable", "id", sb.rec.ID, "name", sb.rec.Name, "err", err)
		} else {
			linux.Network = networkUsage(now, ifs)
		}
	}
	return &runtimeapi.PodSandboxStats{
		Attributes: &runtimeapi.PodSandboxAttributes{
			Id: sb.rec.ID, Metadata: sb.config.GetMetadata(), Labels: sb.config.GetLabels(), Annotations: sb.config.GetAnnotations(),
		},
		Linux: linux,
	}
}

// addPodProcesses adds to a pod's summed figures those of what it runs beside its
// containers, each in a cgroup of its own: its pause process (when it has one) and each
// container's conmon (addPodParts); it returns their process count. A cgroup that
// cannot be read is logged and left out.
func (s *Server) addPodProcesses(sb sandbox, containers []container, cpu *runtimeapi.CpuUsage, mem *runtimeapi.MemoryUsage) uint64 {
	var parts []podPart
	if sb.obj.Namespaces[string(netns.PID)] != "" {
		if cg, err := oci.SandboxCgroupStats(sb.rec.ID, sb.config, s.cfg.SystemdCgroup()); err != nil {
			s.log.Warn("pause process stats not readable", "id", sb.rec.ID, "name", sb.rec.Name, "err", err)
		} else {
			parts = append(parts, podPart{cpuKey{sb.rec.ID, partPause}, cg})
		}
	}
	for _, c := range containers {
		rt, err := s.runtimes.Runtime(c.obj.Handler)
		if err != nil {
			continue
		}
		cg, err := rt.ConmonStats(c.rec.ID)
		if errors.Is(err, oci.ErrNoCgroup) {
			continue
		}
		if err != nil {
			s.log.Warn("conmon stats not readable", "id", c.rec.ID, "name", c.rec.Name, "err", err)
			continue
		}
		parts = append(parts, podPart{cpuKey{c.rec.ID, partConmon}, cg})
	}
	return s.stats.addPodParts(parts, cpu, mem)
}

// podPart is a cgroup beside a pod's containers that its summed figures count.
type podPart struct {
	key cpuKey
	cg  oci.CgroupStats
}

// addPodParts adds parts' figures to a pod's sums of its containers' and returns their
// process count. The CPU rate adds each part's rate since its previous sample, as the
// containers' do theirs: the pod's rate is then the rate of the CPU time it reports (as
// the rate containerd and CRI-O take of a pod cgroup's usage counts everything in it),
// not its containers' alone while its usage counts the pause process and conmons too.
func (st *statsState) addPodParts(parts []podPart, cpu *runtimeapi.CpuUsage, mem *runtimeapi.MemoryUsage) uint64 {
	var procs uint64
	for _, p := range parts {
		cg := p.cg
		cpu.UsageCoreNanoSeconds.Value += cg.CPUUsageNanos
		cpu.UsageNanoCores.Value += st.nanoCores(p.key, cg.Timestamp, cg.CPUUsageNanos)
		mem.WorkingSetBytes.Value += cg.MemoryWorkingSet
		mem.UsageBytes.Value += cg.MemoryUsage
		mem.RssBytes.Value += cg.RSS
		mem.PageFaults.Value += cg.PageFaults
		mem.MajorPageFaults.Value += cg.MajorPageFaults
		procs += cg.Processes
	}
	return procs
}

// networkUsage turns interface counters into the CRI's; the default interface is the
// one CNI attached (eth0).
func networkUsage(ts int64, ifs []netns.InterfaceStats) *runtimeapi.NetworkUsage {
	n := &runtimeapi.NetworkUsage{Timestamp: ts}
	for _, i := range ifs {
		u := &runtimeapi.NetworkInterfaceUsage{
			Name:    i.Name,
			RxBytes: &runtimeapi.UInt64Value{Value: i.RxBytes}, RxErrors: &runtimeapi.UInt64Value{Value: i.RxErrors},
			TxBytes: &runtimeapi.UInt64Value{Value: i.TxBytes}, TxErrors: &runtimeapi.UInt64Value{Value: i.TxErrors},
		}
		if i.Name == netns.DefaultIfName {
			n.DefaultInterface = u
		} else {
			n.Interfaces = append(n.Interfaces, u)
		}
	}
	return n
}

// errNoStats is the answer when the daemon runs without containers.
var errNoStats = newError(errUnavailable, "containers are not available on this daemon (no storage or runtime)")
