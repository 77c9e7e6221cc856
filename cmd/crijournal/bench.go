package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/crijournal/crijournal/bench"
)

func init() {
	subcommands = append(subcommands, newBenchCommand)
}

func newBenchCommand() *cobra.Command {
	var o bench.Options
	var asJSON bool
	var compare string
	var rounds int
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a CRI endpoint (crijournal, containerd or CRI-O) with a pod workload",
		Long: `bench creates --pods pod sandboxes, --concurrency at a time (with --image, a container is
created and started in each), then stops and removes everything it made, also when
interrupted. It reports latency percentiles per operation and pods per second.
With --client-timeout it behaves like a kubelet: a request that takes longer is
abandoned, and a failed request is retried with the same name until it succeeds (at
most --max-retries times); the report counts the retries and errors each pod took,
and the time until every pod was returned. After the teardown, pods that no answered
request returned (finished by the runtime after their request was abandoned) are
found by their label and removed too.

With --compare-endpoint, the workload runs --rounds times on each endpoint,
alternating, and the report gives per operation the ratio of the p50 latencies
(median of the per-round ratios): two daemons of one runtime differing in one
setting (journal_no_sync, say) compared in one run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o.Progress = func(done, total int) {
				fmt.Fprintf(os.Stderr, "\rpods up: %d/%d", done, total)
				if done == total {
					fmt.Fprintln(os.Stderr)
				}
			}
			if compare != "" {
				c, err := bench.Compare(ctx, o, compare, rounds)
				if c != nil && len(c.Runs) > 0 {
					if asJSON {
						c.WriteJSON(cmd.OutOrStdout())
					} else {
						c.WriteTable(cmd.OutOrStdout())
					}
				}
				return err
			}
			rep, err := bench.Run(ctx, o)
			if rep == nil {
				return err
			}
			if asJSON {
				rep.WriteJSON(cmd.OutOrStdout())
			} else {
				rep.WriteTable(cmd.OutOrStdout())
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Endpoint, "endpoint", "unix:///run/crijournal/crijournal.sock", "CRI endpoint")
	f.IntVarP(&o.Pods, "pods", "n", 50, "number of pods")
	f.IntVarP(&o.Concurrency, "concurrency", "c", 1, "pods created at a time")
	f.StringVar(&o.Image, "image", "", "create and start a container of this image in each pod")
	f.StringSliceVar(&o.Command, "command", nil, "container command (default sleep 3600)")
	f.DurationVar(&o.Timeout, "client-timeout", 0, "abandon and retry requests that take longer, like a kubelet (0: no timeout)")
	f.IntVar(&o.MaxRetries, "max-retries", 100, "with --client-timeout, retries of a failed request before its pod counts as failed")
	f.StringVar(&o.Prefix, "prefix", "", "pod name prefix (default bench-<unix time>)")
	f.StringVar(&compare, "compare-endpoint", "", "run the same workload on this endpoint too, alternating, and report the ratio of p50 latencies (endpoint / this)")
	f.IntVar(&rounds, "rounds", 3, "with --compare-endpoint, runs on each endpoint")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
