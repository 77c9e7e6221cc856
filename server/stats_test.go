package server

import (
	"testing"
	"time"
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
