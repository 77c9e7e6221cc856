package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
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
	ops := make([]string, 0, len(r.Ops))
	for op := range r.Ops {
		ops = append(ops, string(op))
	}
	sort.Strings(ops)
	for _, op := range ops {
		s := r.Ops[Op(op)]
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t\n", op, s.Count, s.P50ms, s.P90ms, s.P99ms, s.MaxMs)
	}
	tw.Flush()
	fmt.Fprintf(w, "pods per second: %.1f; time to all pods: %.0f ms; failed: %d; retries: %d\n",
		r.PodsPerSecond, r.TimeToAllMs, r.Failed, r.RetriesTotal)
	for kind, n := range r.ErrorKinds {
		fmt.Fprintf(w, "  errors %q: %d\n", kind, n)
	}
}

// WriteJSON prints the report for machines.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
