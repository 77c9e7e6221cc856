package main

import (
	"errors"
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
	var plotFile string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure a CRI endpoint (crijournal, containerd or CRI-O) with a pod workload",
		Long: `bench creates --pods pod sandboxes, --concurrency at a time (with --image, a container is
created and started in each), then stops and removes everything it made, also when
interrupted. It reports latency percentiles per operation and pods per second, and
shows its progress on stderr (a bar on a terminal, whole lines otherwise). With
--plot FILE.svg it draws each operation's latency distribution.
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
			o.Progress = newProgress(os.Stderr)
			if compare != "" {
				c, err := bench.Compare(ctx, o, compare, rounds)
				if c != nil && len(c.Runs) > 0 {
					if plotFile != "" {
						if perr := writePlot(plotFile, c.Series()); perr != nil {
							return errors.Join(err, perr)
						}
					}
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
			if plotFile != "" {
				if perr := writePlot(plotFile, []bench.Series{rep.Series()}); perr != nil {
					return errors.Join(err, perr)
				}
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
	f.StringVar(&plotFile, "plot", "", "draw each operation's latency distribution into this SVG file (one curve per endpoint)")
	return cmd
}

// writePlot draws the series into the SVG file path.
func writePlot(path string, series []bench.Series) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	if err := bench.Plot(f, series); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	fmt.Fprintf(os.Stderr, "latency distributions drawn in %s\n", path)
	return nil
}
