package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/crijournal/crijournal/bench"
	"github.com/crijournal/crijournal/config"
)

// newRootCommand returns the crijournal-bench command.
func newRootCommand() *cobra.Command {
	var o bench.Options
	var asJSON bool
	var compare []string
	var rounds int
	var plotFile string
	var workload string
	var idle bench.IdleOptions
	var so bench.ScaleOptions
	var floor bench.FloorOptions
	var withFloor bool
	cmd := &cobra.Command{
		Use:   "crijournal-bench",
		Short: "Measure a CRI endpoint (crijournal, containerd or CRI-O) with a pod workload",
		Long: `crijournal-bench creates --pods pod sandboxes, --concurrency at a time (with
--image, a container is created and started in each), then stops and removes
everything it made, also when interrupted. It reports latency percentiles per
operation and pods per second, and shows its progress on stderr (a bar on a
terminal, whole lines otherwise). With --plot FILE.svg it draws each operation's
latency distribution.
With --client-timeout it behaves like a kubelet: a request that takes longer is
abandoned, and a failed request is retried with the same name until it succeeds (at
most --max-retries times); the report counts the retries and errors each pod took,
and the time until every pod was returned. After the teardown, pods that no answered
request returned (finished by the runtime after their request was abandoned) are
found by their label and removed too.

With --compare-endpoint, the workload runs --rounds times on each endpoint,
alternating (which one goes first in a round alternates too), and the report gives
per operation the ratio of the p50 latencies (median of the per-round ratios): two
daemons of one runtime differing in one setting (journal_no_sync, say), or
crijournal and containerd, compared in one run. Given more than once, each round
runs every endpoint in turn (the order turning by one a round) and the report
gives the ratios to each baseline from the same rounds: crijournal against
containerd 1.6 and 2.x, say.

Workloads (--workload):
  pods   the above (the default).
  idle   brings --pods pods up, then polls them as a kubelet does for --duration
         (ListPodSandbox and ListContainers every second; PodSandboxStatus and
         ContainerStatus of each, ListContainerStats and ListPodSandboxMetrics, every
         10 s) and reports the daemon's CPU time (utime+stime from /proc/<pid>/stat, the
         daemon only) as % of one core, its peak RSS (VmHWM), and the RSS of the pods'
         helper processes (conmon, containerd's shim: processes whose command line
         names a pod or container ID) per pod; with --share-pid, the RSS of
         crijournal's pause processes apart. The daemon is found from the socket's
         peer credentials (SO_PEERCRED), or given with --daemon-pid.
  scale  fills the node to --pods pods, --concurrency at a time, and at 0,
         --scale-step, ... pods measures --scale-samples more pods brought up one at a
         time and the latency of ListPodSandbox and ListContainers.
  floor  times runc create, runc start and runc delete -f of a busybox bundle and the
         CNI bridge plugin's ADD and DEL into a fresh network namespace, directly
         (root needed). With --floor, the pods workload (each round of a comparison)
         is followed by the floor, at the same concurrency (all its runs' ups, then
         all their downs, as the pods come up and go down), and PodUp and PodDown are
         divided by it; with --workload scale, the floor (one at a time) is measured at
         every point too.

When the endpoint is crijournal, a comparison, a run with --floor and the idle
workload end with the targets the run measured (docs/BENCHMARKS.md, "Targets"):
pod up and down over the floor and pod up over containerd 2.x's, one and four at a
time; the daemon's peak RSS with 20 pods, conmon's and the pause process's RSS; the
idle daemon's CPU with 100 pods. Each is one run's figure beside its limit: judge
a target by the median of several runs.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			o.Progress = newProgress(os.Stderr)
			out := cmd.OutOrStdout()
			var fo *bench.FloorOptions
			if withFloor || workload == "floor" {
				floor.Command = o.Command
				floor.Concurrency = o.Concurrency
				floor.Runs = floorRuns(floor.Runs, cmd.Flags().Changed("floor-runs"), withFloor && workload == "pods", o.Pods)
				fo = &floor
			}
			switch workload {
			case "pods":
			case "floor":
				f, err := bench.Floor(ctx, *fo)
				if err != nil {
					return err
				}
				return write(out, asJSON, f, f.WriteTable)
			case "idle":
				idle.Options = o
				r, err := bench.Idle(ctx, idle)
				if r == nil {
					return err
				}
				return errors.Join(err, write(out, asJSON, r, r.WriteTable))
			case "scale":
				so.Options = o
				if fo != nil {
					one := *fo
					one.Concurrency = 1
					so.Floor = func(ctx context.Context) (*bench.FloorReport, error) { return bench.Floor(ctx, one) }
				}
				r, err := bench.Scale(ctx, so)
				if r == nil {
					return err
				}
				return errors.Join(err, write(out, asJSON, r, r.WriteTable))
			default:
				return fmt.Errorf("unknown workload %q: want pods, idle, scale or floor", workload)
			}
			if len(compare) > 0 {
				var measureFloor func(context.Context) (*bench.FloorReport, error)
				if fo != nil {
					measureFloor = func(ctx context.Context) (*bench.FloorReport, error) { return bench.Floor(ctx, *fo) }
				}
				cs, err := bench.CompareAll(ctx, o, compare, rounds, measureFloor)
				if len(cs) == 0 {
					return err
				}
				if plotFile != "" {
					if perr := writePlot(plotFile, cs.Series()); perr != nil {
						return errors.Join(err, perr)
					}
				}
				if len(cs) == 1 { // one baseline: the comparison as it always was
					return errors.Join(err, write(out, asJSON, cs[0], cs[0].WriteTable))
				}
				return errors.Join(err, write(out, asJSON, cs, cs.WriteTable))
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
			if fo == nil || err != nil {
				return errors.Join(err, write(out, asJSON, rep, rep.WriteTable))
			}
			f, err := bench.Floor(ctx, *fo)
			if err != nil {
				return errors.Join(err, write(out, asJSON, rep, rep.WriteTable))
			}
			wf := bench.NewWithFloor(rep, f)
			return write(out, asJSON, wf, wf.WriteTable)
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
	f.StringArrayVar(&compare, "compare-endpoint", nil, "run the same workload on this endpoint too, alternating, and report the ratio of p50 latencies (endpoint / this); repeated, against each of them in the same rounds")
	f.IntVar(&rounds, "rounds", 3, "with --compare-endpoint, runs on each endpoint")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringVar(&workload, "workload", "pods", "pods: bring pods up and down and time it; idle: bring --pods up and poll them kubelet-style for --duration, reading the daemon's CPU time; scale: fill the node to --pods and measure one more pod and the List calls every --scale-step; floor: time runc and the CNI plugin by themselves")
	f.DurationVar(&idle.Duration, "duration", time.Minute, "with --workload idle, how long to poll")
	f.BoolVar(&o.SharePID, "share-pid", false, "pods share a pid namespace among their containers (pid POD, shareProcessNamespace): crijournal then runs a pause process per pod, whose RSS is reported")
	f.IntVar(&o.DaemonPID, "daemon-pid", 0, "the daemon whose CPU time and memory are read from /proc (0: the socket's peer; -1: none)")
	f.IntVar(&so.Step, "scale-step", 100, "with --workload scale, pods between two measurements")
	f.IntVar(&so.Samples, "scale-samples", 5, "with --workload scale, pods brought up one at a time and measured at each step")
	f.IntVar(&so.ListCalls, "list-calls", 20, "with --workload scale, calls of each List timed at each step")
	f.BoolVar(&withFloor, "floor", false, "also measure the floor (at --concurrency: runc create/start/delete -f of a busybox bundle and the CNI ADD/DEL into a fresh namespace, directly) after the run (each round), and compare PodUp and PodDown with it")
	f.IntVar(&floor.Runs, "floor-runs", 10, "runs of the floor (medians are taken); with --floor and the pods workload, as many as --pods unless set")
	f.StringVar(&floor.Runc, "runc", floorRunc(), "the floor's OCI runtime (default: the one a crijournal handler without a path runs)")
	f.StringSliceVar(&floor.CNIPluginDirs, "cni-plugin-dirs", []string{"/opt/cni/bin", "/usr/lib/cni"}, "the floor's CNI plugin directories")
	f.StringVar(&plotFile, "plot", "", "draw each operation's latency distribution into this SVG file (one curve per endpoint)")
	return cmd
}

// write prints v as JSON or, for people, with table.
func write(w io.Writer, asJSON bool, v any, table func(io.Writer)) error {
	if !asJSON {
		table(w)
		return nil
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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

// floorRunc is the runc a handler without a path runs (config.BundledRunc when `make deps`
// installed it, else runc in PATH), so that the floor times the runtime the daemon uses.
func floorRunc() string {
	if p := (config.Config{}).RuntimePath("runc"); p != "" {
		return p
	}
	return "runc"
}

// floorRuns is how many runs the floor makes: runs (--floor-runs) when given
// (given) or when the floor is measured alone, else, when it follows a pods
// workload (afterPods), as many as the workload's pods: a last wave of fewer
// runs than the concurrency meets less contention, and would weigh more among
// fewer runs than among the pods.
func floorRuns(runs int, given, afterPods bool, pods int) int {
	if given || !afterPods {
		return runs
	}
	return pods
}
