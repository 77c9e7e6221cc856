package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestProgressLines: when the output is not a terminal, progress comes as whole lines, one
// per 5% and one at the end, and a second run starts counting again.
func TestProgressLines(t *testing.T) {
	var buf bytes.Buffer
	progress := newProgress(&buf)
	for run := 0; run < 2; run++ {
		for done := 0; done <= 100; done++ {
			progress(done, 100)
		}
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != 40 {
		t.Fatalf("two runs of 100 pods printed %d lines, want 40:\n%s", len(lines), buf.String())
	}
	if strings.Contains(buf.String(), "\r") {
		t.Error("progress to a non-terminal has carriage returns")
	}
	if !strings.HasPrefix(lines[0], "pods up: 5/100 (5%)") || !strings.HasPrefix(lines[19], "pods up: 100/100 (100%)") || !strings.HasPrefix(lines[20], "pods up: 5/100") {
		t.Errorf("progress lines:\n%s", buf.String())
	}

	buf.Reset()
	progress = newProgress(&buf)
	for done := 0; done <= 3; done++ {
		progress(done, 3)
	}
	if n := strings.Count(buf.String(), "\n"); n != 3 {
		t.Errorf("a run of 3 pods printed %d lines, want one per pod:\n%s", n, buf.String())
	}
}
