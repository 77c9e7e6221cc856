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
		if got := st.nanoCores("c", s.at, s.usage); got != s.want {
			t.Errorf("step %d: nanoCores = %d, want %d", i, got, s.want)
		}
	}
	if got := st.nanoCores("other", t0.Add(7*time.Second), 3e9); got != 0 {
		t.Errorf("first sample of another container = %d, want 0", got)
	}
	st.prune(map[string]bool{"other": true})
	if _, ok := st.cpu["c"]; ok {
		t.Error("prune kept a container that is gone")
	}
	if _, ok := st.cpu["other"]; !ok {
		t.Error("prune dropped a live container")
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
