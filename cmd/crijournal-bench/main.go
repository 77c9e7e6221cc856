// Command crijournal-bench measures a CRI endpoint (crijournal, containerd or CRI-O) with
// a pod workload: latencies, retries, the daemon's CPU time and memory, the runc and CNI
// floor; see package bench and docs/BENCHMARKS.md.
//
// It is a program of its own, not a subcommand of the daemon, so that the daemon's binary
// does not link gonum/plot and the progress bar: their package initialisation (fonts
// parsed for the plots) would otherwise run in every process started from that binary,
// the storage re-execs included.
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(os.Stderr, "crijournal-bench: %s\n", line)
		}
		os.Exit(1)
	}
}
