package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

// TestPlot draws two series of known latencies: the SVG is well-formed XML, has one panel
// per operation present, and names every series with its sample count and median.
func TestPlot(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	series := []Series{
		{Label: "crijournal", Samples: map[Op][]time.Duration{OpRunPodSandbox: ms(10, 20, 30), OpStopPodSandbox: ms(5, 6, 7)}},
		{Label: "containerd", Samples: map[Op][]time.Duration{OpRunPodSandbox: ms(40, 50, 60, 70)}},
	}
	var buf bytes.Buffer
	if err := Plot(&buf, series); err != nil {
		t.Fatal(err)
	}
	svg := buf.String()
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{"RunPodSandbox", "StopPodSandbox", "crijournal (n=3, p50 20.0 ms)", "containerd (n=4, p50 60.0 ms)"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	if strings.Contains(svg, "CreateContainer") {
		t.Error("the SVG has a panel for an operation no series measured")
	}
	if err := Plot(io.Discard, []Series{{Label: "empty"}}); err == nil {
		t.Error("Plot of no latencies succeeded")
	}
}
