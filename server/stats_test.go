package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/cgroups"
	"google.golang.org/protobuf/testing/protocmp"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

func TestNanoCores(t *testing.T) {
	var st statsState
	t0 := time.Unix(1000, 0)
	steps := []struct {
		at    time.Time
		usage uint64
		want  uint64
	}{
		{t0, 5e9, 0},                                // first sample: no rate yet
		{t0.Add(2 * time.Second), 6e9, 5e8},         // 1 s of CPU in 2 s: half a core
		{t0.Add(4 * time.Second), 10e9, 2e9},        // 4 s in 2 s: two cores
		{t0.Add(4 * time.Second), 11e9, 0},          // no time passed
		{t0.Add(5 * time.Second), 1e9, 0},           // usage went back (a new cgroup): no rate
		{t0.Add(6 * time.Second), 1e9 + 25e7, 25e7}, // and counts from there
	}
	for i, s := range steps {
		if got := st.nanoCores(cpuKey{id: "c"}, s.at, s.usage); got != s.want {
			t.Errorf("step %d: nanoCores = %d, want %d", i, got, s.want)
		}
	}
	if got := st.nanoCores(cpuKey{id: "other"}, t0.Add(7*time.Second), 3e9); got != 0 {
		t.Errorf("first sample of another container = %d, want 0", got)
	}
	if got := st.nanoCores(cpuKey{"c", partConmon}, t0.Add(7*time.Second), 3e9); got != 0 {
		t.Errorf("first sample of c's conmon = %d, want 0 (apart from c's)", got)
	}
	st.nanoCores(cpuKey{"other", partConmon}, t0.Add(7*time.Second), 1e9)
	st.prune(map[string]bool{"other": true})
	for k, want := range map[cpuKey]bool{{id: "c"}: false, {"c", partConmon}: false, {id: "other"}: true, {"other", partConmon}: true} {
		if _, ok := st.cpu[k]; ok != want {
			t.Errorf("after prune, %v kept: %v, want %v", k, ok, want)
		}
	}
}

// TestPodRateIsItsUsagesRate is issue 51's item 7 (pod stats) for a pod without a cgroup
// of its own: its usage_nano_cores is the rate of the usage_core_nano_seconds it reports,
// which counts its pause process and conmons beside its containers, as a pod cgroup's
// rate is (containerd and CRI-O take the rate of the pod cgroup's usage); it was its
// containers' rate alone.
func TestPodRateIsItsUsagesRate(t *testing.T) {
	var st statsState
	t0 := time.Unix(1000, 0)
	type sample struct{ ctr, pause, conmon uint64 } // CPU time so far, ns
	// sum sums a pod's figures at one time as podStats does: its container's, then its
	// parts' (addPodParts); it returns the pod's CPU.
	sum := func(at time.Time, s sample, withConmon bool) *runtimeapi.CpuUsage {
		cpu := &runtimeapi.CpuUsage{
			Timestamp:            at.UnixNano(),
			UsageCoreNanoSeconds: &runtimeapi.UInt64Value{Value: s.ctr},
			UsageNanoCores:       &runtimeapi.UInt64Value{Value: st.nanoCores(cpuKey{id: "c"}, at, s.ctr)},
		}
		parts := []podPart{{cpuKey{"pod", partPause}, oci.CgroupStats{Timestamp: at, CPUUsageNanos: s.pause, Processes: 1}}}
		if withConmon {
			parts = append(parts, podPart{cpuKey{"c", partConmon}, oci.CgroupStats{Timestamp: at, CPUUsageNanos: s.conmon, Processes: 1}})
		}
		mem := &runtimeapi.MemoryUsage{WorkingSetBytes: &runtimeapi.UInt64Value{}, UsageBytes: &runtimeapi.UInt64Value{},
			RssBytes: &runtimeapi.UInt64Value{}, PageFaults: &runtimeapi.UInt64Value{}, MajorPageFaults: &runtimeapi.UInt64Value{}}
		if got, want := st.addPodParts(parts, cpu, mem), uint64(len(parts)); got != want {
			t.Errorf("addPodParts counts %d processes, want %d", got, want)
		}
		return cpu
	}
	last := sum(t0, sample{ctr: 1e9, pause: 1e7, conmon: 2e8}, true)
	if last.GetUsageNanoCores().GetValue() != 0 {
		t.Errorf("first sample's rate %d, want 0", last.GetUsageNanoCores().GetValue())
	}
	for _, tc := range []struct {
		name   string
		at     time.Duration // after the previous sample
		s      sample
		conmon bool
		want   uint64 // the pod's rate
	}{
		// In 2 s: 1 s of the container's, 0.02 of the pause process's, 0.6 of conmon's.
		{"all busy", 2 * time.Second, sample{ctr: 2e9, pause: 3e7, conmon: 8e8}, true, 81e7},
		{"only conmon", time.Second, sample{ctr: 2e9, pause: 3e7, conmon: 9e8}, true, 1e8},
		// Its conmon gone: the rest's rate, not a negative one.
		{"conmon gone", time.Second, sample{ctr: 25e8, pause: 3e7}, false, 5e8},
	} {
		prev := last
		last = sum(time.Unix(0, prev.GetTimestamp()).Add(tc.at), tc.s, tc.conmon)
		if got := last.GetUsageNanoCores().GetValue(); got != tc.want {
			t.Errorf("%s: the pod's rate %d, want %d", tc.name, got, tc.want)
		}
		if tc.conmon { // the same cgroups as the sample before: the rate of the usage reported
			du := last.GetUsageCoreNanoSeconds().GetValue() - prev.GetUsageCoreNanoSeconds().GetValue()
			if got, want := last.GetUsageNanoCores().GetValue(), uint64(float64(du)/tc.at.Seconds()); got != want {
				t.Errorf("%s: the pod's rate %d, its usage's %d", tc.name, got, want)
			}
		}
	}
}

// TestStatsContainersAsDecoded: the containers the stats calls read are those the
// records decode to, filtered by ID, sandbox and labels, whether or not a List call
// cached them, and reading them leaves the decode cache to the List calls.
func TestStatsContainersAsDecoded(t *testing.T) {
	s := scaleServer(t)
	var ctrIDs []string
	for i := range 3 {
		podID := benchCreate(t, s, journal.KindSandbox, fmt.Sprintf("pod-%d", i), "", sandboxObject{Config: mustMarshal(benchPodConfig(i)), CreatedAt: time.Now()})
		cfg := benchContainerConfig()
		cfg.Labels["n"] = fmt.Sprint(i)
		ctrIDs = append(ctrIDs, benchCreate(t, s, journal.KindContainer, fmt.Sprintf("ctr-%d", i), podID, containerObject{
			Config: mustMarshal(cfg), SandboxID: podID, Handler: "runc", CreatedAt: time.Now(),
		}))
	}
	want := func(id, sandbox string, selector map[string]string) []string {
		var out []string
		for _, r := range s.journal.List(func(r *journal.Record) bool { return r.Kind == journal.KindContainer }) {
			c, err := decodeContainer(r)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(r.ID, id) && strings.HasPrefix(r.Parent, sandbox) && labelsMatch(c.config.GetLabels(), selector) {
				out = append(out, r.ID+" "+c.config.GetLabels()["n"])
			}
		}
		return out
	}
	got := func(id, sandbox string, selector map[string]string) []string {
		var out []string
		for _, c := range s.statsContainers(id, sandbox, selector) {
			out = append(out, c.rec.ID+" "+c.config.GetLabels()["n"])
		}
		return out
	}
	rec, _ := s.journal.Get(ctrIDs[1])
	for _, listed := range []bool{false, true} {
		if listed { // a relist caches every container's decoded object
			if _, err := s.ListContainers(context.Background(), &runtimeapi.ListContainersRequest{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []struct {
			id, sandbox string
			selector    map[string]string
		}{{"", "", nil}, {ctrIDs[1][:8], "", nil}, {"", rec.Parent, nil}, {"", "", map[string]string{"n": "2"}}, {"", "", map[string]string{"n": "9"}}} {
			if g, w := got(f.id, f.sandbox, f.selector), want(f.id, f.sandbox, f.selector); !slices.Equal(g, w) {
				t.Errorf("listed %v, filter %+v: statsContainers %v, want %v", listed, f, g, w)
			}
		}
		if n := len(s.containerCache.entries); listed != (n == 3) || !listed && n != 0 {
			t.Errorf("listed %v: %d entries in the decode cache", listed, n)
		}
	}
}

// TestPSIStats: a cgroup's pressure figures reach the CRI with the total in nanoseconds
// (the kernel counts microseconds), and a resource without them (cgroup v1) is left out.
func TestPSIStats(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   *cgroups.PSIStats
		want *runtimeapi.PsiStats
	}{
		{name: "none (cgroup v1)"},
		{name: "some and full",
			in: &cgroups.PSIStats{Some: cgroups.PSIData{Avg10: 1.5, Avg60: 0.25, Avg300: 0.125, Total: 4321},
				Full: cgroups.PSIData{Avg10: 0.5, Total: 1234}},
			want: &runtimeapi.PsiStats{Some: &runtimeapi.PsiData{Avg10: 1.5, Avg60: 0.25, Avg300: 0.125, Total: 4321000},
				Full: &runtimeapi.PsiData{Avg10: 0.5, Total: 1234000}}},
		{name: "no stall", in: &cgroups.PSIStats{},
			want: &runtimeapi.PsiStats{Some: &runtimeapi.PsiData{}, Full: &runtimeapi.PsiData{}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, psiStats(tt.in), protocmp.Transform()); diff != "" {
				t.Errorf("psiStats (-want +got):\n%s", diff)
			}
		})
	}
}
