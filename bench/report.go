package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
)

// WriteTable prints the report for people.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "endpoint %s (%s): %d pods, %d at a time", r.Endpoint, r.Runtime, r.Pods, r.Concurrency)
	if r.ClientTimeout != "" {
		fmt.Fprintf(w, ", client timeout %s", r.ClientTimeout)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATION\tCOUNT\tP50 ms\tP90 ms\tP99 ms\tMAX ms\t")
	for _, op := range slices.Sorted(maps.Keys(r.Ops)) {
		s := r.Ops[op]
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\n", op, s.Count, s.P50ms, s.P90ms, s.P99ms, s.MaxMs)
	}
	tw.Flush()
	fmt.Fprintf(w, "pods per second: %.1f; time to all pods: %.0f ms; failed: %d; retries: %d\n",
		r.PodsPerSecond, r.TimeToAllMs, r.Failed, r.RetriesTotal)
	for _, kind := range slices.Sorted(maps.Keys(r.ErrorKinds)) {
		fmt.Fprintf(w, "  errors %q: %d\n", kind, r.ErrorKinds[kind])
	}
	// Per pod, those that met errors: how many retries, and which errors.
	for _, p := range r.PerPod {
		if len(p.Errors) == 0 {
			continue
		}
		counts := map[string]int{}
		for _, e := range p.Errors {
			counts[classify(e)]++
		}
		fmt.Fprintf(w, "  pod %s: %d retries", p.Name, p.Retries)
		for _, kind := range slices.Sorted(maps.Keys(counts)) {
			fmt.Fprintf(w, "; %q x%d", kind, counts[kind])
		}
		if p.Err != "" {
			fmt.Fprintf(w, "; FAILED: %s", p.Err)
		}
		fmt.Fprintln(w)
	}
	if r.RemovalsSettled > 0 {
		fmt.Fprintf(w, "removals under way in the runtime after the teardown, waited for: %.1f ms\n", r.RemovalsSettledMs)
	}
	if r.Swept > 0 {
		fmt.Fprintf(w, "pods made by abandoned requests, found and removed after the run: %d\n", r.Swept)
	}
	for _, e := range r.TeardownErrors {
		fmt.Fprintf(w, "NOT CLEANED UP: %s\n", e)
	}
}

// WriteJSON prints the report for machines.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
