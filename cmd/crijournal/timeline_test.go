package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// bar returns the bar of the timeline line that names kind.
func bar(t *testing.T, out, kind string) string {
	t.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, " "+kind+" ") {
			_, rest, _ := strings.Cut(line, "|")
			b, _, _ := strings.Cut(rest, "|")
			return b
		}
	}
	t.Fatalf("no timeline line for %s:\n%s", kind, out)
	return ""
}

// TestTimeline draws a sandbox creation whose network took four minutes, stuck at its
// last step: one bar per step placed on a common axis, long where the time went, the
// durations and states printed, and the stalled stage named.
func TestTimeline(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	r := journal.Record{
		ID: "0123456789abcdef", Kind: journal.KindSandbox, Name: "k8s_pod", State: journal.StateCreating,
		Stage: "sandbox network creation", Created: t0, Updated: t0.Add(4 * time.Minute),
		Steps: []journal.Step{
			{Seq: 1, Kind: "netns-pin", Status: journal.StepDone, Started: t0, Finished: t0.Add(10 * time.Millisecond)},
			{Seq: 2, Kind: "cni-attach", Status: journal.StepDone, Started: t0.Add(10 * time.Millisecond), Finished: t0.Add(4 * time.Minute)},
			{Seq: 3, Kind: "oci-create", Stage: "sandbox container creation", Status: journal.StepIntent, Started: t0.Add(4 * time.Minute)},
		},
	}
	var buf bytes.Buffer
	if err := writeTimeline(&buf, r, t0.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Logf("\n%s", out)

	pin, cni, oci := bar(t, out, "netns-pin"), bar(t, out, "cni-attach"), bar(t, out, "oci-create")
	for _, b := range []string{pin, cni, oci} {
		if n := len([]rune(b)); n != timelineWidth {
			t.Fatalf("bar %q is %d columns, want %d", b, n, timelineWidth)
		}
	}
	if got := strings.Count(pin, string(barDone)); got != 1 {
		t.Errorf("the 10ms step has %d columns, want 1", got)
	}
	// 4 of the 5 minutes: 32 of 40 columns, starting at the left.
	if got := strings.Count(cni, string(barDone)); got < 31 || got > 32 || !strings.HasPrefix(cni, string(barDone)) {
		t.Errorf("the 4m network step is %q, want about 32 columns from the start", cni)
	}
	// The open step runs from 4m to now (5m): the last 8 columns, drawn as open.
	if !strings.HasSuffix(oci, strings.Repeat(string(barOpen), 8)) || strings.ContainsRune(oci, barDone) {
		t.Errorf("the open step is %q, want the last 8 columns open", oci)
	}
	for _, want := range []string{"5m0s from creation", "4m0s", "10ms", "1m0s", "done", "intent", "in progress: sandbox container creation"} {
		if !strings.Contains(out, want) {
			t.Errorf("timeline lacks %q", want)
		}
	}

	// The same record after a crash (not being created any more): the open step ends at the
	// last update and is named as where the creation stalled.
	r.State = journal.StateUndoing
	buf.Reset()
	if err := writeTimeline(&buf, r, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "stalled at: sandbox container creation") || strings.Contains(buf.String(), "1h0m0s") {
		t.Errorf("timeline of an interrupted creation:\n%s", buf.String())
	}
}
