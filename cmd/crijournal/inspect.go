package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/journal"
)

func init() {
	subcommands = append(subcommands, newInspectCommand)
}

type inspectOptions struct {
	asJSON, watch, check, leaks, paths bool
	states, kinds, cgroupParents       []string
}

func newInspectCommand() *cobra.Command {
	var o inspectOptions
	cmd := &cobra.Command{
		Use:   "inspect [ID|NAME|ID-prefix]",
		Short: "Show the journal's records: every creation, its state, stage and steps",
		Long: `inspect shows the journal's records. While the daemon runs it asks the daemon over its
inspection socket (inspect.sock beside the CRI socket); when the daemon is down it opens
the journal file read-only. With an argument it shows one record with every step.
--watch follows changes as the daemon makes them (with --json, one JSON list per
change); while the daemon is down it reads the file every second.
--check verifies the file (bbolt's check and the journal's invariants) and exits non-zero
listing the problems.
--leaks lists what the node holds that no journal record owns, that its record says is
undone, and records left half done while the daemon is down: namespace pins and mounts,
host-local IP files, veths on the CNI bridges, libcni cache entries, the pods' files,
storage containers and layer directories, runtime containers, conmon processes and
state, cgroups; it exits non-zero when something leaked. With --json it prints
{"leaks": [...], "held": [...]}, held being what the records own.
--paths prints, as JSON, where the node keeps things (every path the daemon derives
from the configuration), for scripts.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			src := newRecordSource(cfg)
			out := cmd.OutOrStdout()
			if o.check {
				return runCheck(cmd.Context(), src, out)
			}
			if o.leaks {
				return runLeaks(cmd.Context(), cfg, src, out, o)
			}
			if o.paths {
				return writeJSON(out, nodePaths(cfg.Layout()))
			}
			if o.watch {
				return runWatch(cmd.Context(), src, out, o, args)
			}
			records, err := src.records(cmd.Context())
			if err != nil {
				return err
			}
			return render(out, filterRecords(records, o.states, o.kinds), o, args)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	f.BoolVar(&o.watch, "watch", false, "follow changes live until interrupted (with --json: one JSON list per change)")
	f.BoolVar(&o.check, "check", false, "verify the journal file and its invariants; exit non-zero on problems")
	f.BoolVar(&o.leaks, "leaks", false, "list what the node holds that no journal record owns; exit non-zero when something leaked")
	f.BoolVar(&o.paths, "paths", false, "print the node's paths derived from the configuration (JSON), for scripts")
	f.StringSliceVar(&o.cgroupParents, "cgroup-parent", nil, "with --leaks: search cgroups only below these parents, where every cgroup is listed (default: the daemon's own cgroups anywhere)")
	f.StringSliceVar(&o.states, "state", nil, "only records in these states (creating, ready, cached, created, undoing, removing)")
	f.StringSliceVar(&o.kinds, "kind", nil, "only records of these kinds (sandbox, container)")
	return cmd
}

// recordSource reads records from the live daemon, or from the file when it is down.
type recordSource struct {
	cfg    config.Config
	socket string
	client *http.Client
	from   string // what the last read came from, for --watch
}

func newRecordSource(cfg config.Config) *recordSource {
	socket := cfg.Layout().InspectSocket()
	return &recordSource{cfg: cfg, socket: socket, client: &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}},
	}}
}

// fromDaemon is recordSource.from when the records came from the running daemon.
const fromDaemon = "live, from the daemon"

// errDaemonDown means nothing answers on the inspection socket.
var errDaemonDown = errors.New("daemon not running")

func (s *recordSource) get(ctx context.Context, path string, v any) error {
	resp, err := s.ask(ctx, s.client, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// ask sends GET path to the daemon through client; errDaemonDown when nothing answers.
// The caller closes the body.
func (s *recordSource) ask(ctx context.Context, client *http.Client, path string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://crijournal"+path, nil)
	resp, err := client.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, errDaemonDown
		}
		return nil, fmt.Errorf("ask the daemon on %s: %w", s.socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("ask the daemon on %s: %s", s.socket, resp.Status)
	}
	return resp, nil
}

// openFile opens the journal read-only; a lock held by a daemon that does not answer is
// said plainly.
func (s *recordSource) openFile() (*journal.Journal, error) {
	j, err := journal.Open(s.cfg.Layout().JournalFile(), journal.Options{ReadOnly: true, LockTimeout: s.cfg.JournalLockTimeout})
	if errors.Is(err, journal.ErrInUse) {
		return nil, s.lockedError()
	}
	return j, err
}

// lockedError says that the file is locked although no daemon answers on the socket.
func (s *recordSource) lockedError() error {
	return fmt.Errorf("the journal %s is locked by a running daemon, but nothing answers on %s: is the daemon hung, or using another socket? (%w)",
		s.cfg.Layout().JournalFile(), s.socket, journal.ErrInUse)
}

func (s *recordSource) records(ctx context.Context) ([]journal.Record, error) {
	var records []journal.Record
	err := s.get(ctx, "/records", &records)
	if err == nil {
		s.from = fromDaemon
		return records, nil
	}
	if !errors.Is(err, errDaemonDown) {
		return nil, err
	}
	j, err := s.openFile()
	if err != nil {
		return nil, err
	}
	defer j.Close()
	s.from = "from " + s.cfg.Layout().JournalFile() + ", daemon down"
	return j.List(nil), nil
}

// stream follows the live daemon's records: fn gets every record at once, then again after
// each change, until the daemon goes away (nil) or ctx ends. errDaemonDown: nothing answers.
func (s *recordSource) stream(ctx context.Context, fn func([]journal.Record)) error {
	streaming := &http.Client{Transport: s.client.Transport} // no timeout: the stream lasts
	resp, err := s.ask(ctx, streaming, "/watch")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var records []journal.Record
		if err := dec.Decode(&records); err != nil {
			return nil // the daemon stopped, or ctx ended
		}
		s.from = fromDaemon
		fn(records)
	}
}

// runWatch shows the records, again at every change: pushed by the daemon while it runs;
// read from the file every second while it is down (a daemon that starts is followed).
func runWatch(ctx context.Context, src *recordSource, out io.Writer, o inspectOptions, args []string) error {
	show := func(records []journal.Record) {
		records = filterRecords(records, o.states, o.kinds)
		if o.asJSON {
			// One line per snapshot, for programs that follow it.
			if len(args) == 1 {
				rec, err := pickRecord(records, args[0])
				records = nil
				if err == nil {
					records = []journal.Record{rec}
				}
			}
			if records == nil {
				records = []journal.Record{}
			}
			b, _ := json.Marshal(records)
			fmt.Fprintf(out, "%s\n", b)
			return
		}
		fmt.Fprint(out, "\033[H\033[2J")
		fmt.Fprintf(out, "%s  (%s)\n", time.Now().Format(time.TimeOnly), src.from)
		if err := render(out, records, o, args); err != nil {
			fmt.Fprintln(out, err)
		}
	}
	for ctx.Err() == nil {
		err := src.stream(ctx, show)
		if errors.Is(err, errDaemonDown) {
			j, ferr := src.openFile()
			switch {
			case errors.Is(ferr, journal.ErrInUse):
				// A daemon starting (recovering before it serves): look again soon.
				if !o.asJSON {
					fmt.Fprintln(out, ferr)
				}
			case ferr != nil:
				return ferr
			default:
				src.from = "from " + src.cfg.Layout().JournalFile() + ", daemon down"
				show(j.List(nil))
				j.Close()
			}
		} else if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

// render prints the records, or the one args names.
func render(out io.Writer, records []journal.Record, o inspectOptions, args []string) error {
	if len(args) == 1 {
		rec, err := pickRecord(records, args[0])
		if err != nil {
			return err
		}
		return printRecord(out, rec, o.asJSON, time.Now())
	}
	return printRecords(out, records, o.asJSON, time.Now())
}

func runCheck(ctx context.Context, src *recordSource, out io.Writer) error {
	var problems []string
	err := src.get(ctx, "/check", &problems)
	if errors.Is(err, errDaemonDown) {
		// The file itself, not through Open: Open refuses a damaged file at its first
		// problem, and the check is to list them all.
		found, cerr := journal.CheckFile(src.cfg.Layout().JournalFile(), src.cfg.JournalLockTimeout)
		if errors.Is(cerr, journal.ErrInUse) {
			cerr = src.lockedError()
		}
		if cerr != nil {
			return fmt.Errorf("check failed: %w", cerr)
		}
		for _, p := range found {
			problems = append(problems, p.Error())
		}
	} else if err != nil {
		return err
	}
	if len(problems) == 0 {
		fmt.Fprintln(out, "journal OK")
		return nil
	}
	for _, p := range problems {
		fmt.Fprintln(out, p)
	}
	return fmt.Errorf("journal check found %d problem(s)", len(problems))
}

func filterRecords(records []journal.Record, states, kinds []string) []journal.Record {
	return slices.DeleteFunc(records, func(r journal.Record) bool {
		return (len(states) > 0 && !slices.Contains(states, string(r.State))) ||
			(len(kinds) > 0 && !slices.Contains(kinds, string(r.Kind)))
	})
}

// pickRecord finds the record whose ID or name is ref, or whose ID starts with it.
func pickRecord(records []journal.Record, ref string) (journal.Record, error) {
	var matches []journal.Record
	for _, r := range records {
		if r.ID == ref || r.Name == ref {
			return r, nil
		}
		if strings.HasPrefix(r.ID, ref) {
			matches = append(matches, r)
		}
	}
	switch len(matches) {
	case 0:
		return journal.Record{}, fmt.Errorf("no record with ID or name %q", ref)
	case 1:
		return matches[0], nil
	}
	return journal.Record{}, fmt.Errorf("ID prefix %q matches %d records; give more of it", ref, len(matches))
}

func printRecords(w io.Writer, records []journal.Record, asJSON bool, now time.Time) error {
	if asJSON {
		if records == nil {
			records = []journal.Record{}
		}
		return writeJSON(w, records)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tID\tNAME\tSTATE\tSTAGE\tAGE\tEXPIRY\tFAILED UNDOS")
	for _, r := range records {
		expiry := ""
		if !r.Expiry.IsZero() {
			expiry = "in " + r.Expiry.Sub(now).Round(time.Second).String()
		}
		var failed []string
		for _, s := range r.FailedUndos() {
			failed = append(failed, fmt.Sprintf("%s (next %s)", s.Kind, s.NextRetry.Local().Format(time.TimeOnly)))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.ID[:13], r.Name, r.State, r.Stage,
			now.Sub(r.Created).Round(time.Second), expiry, strings.Join(failed, ", "))
	}
	return tw.Flush()
}

func printRecord(w io.Writer, r journal.Record, asJSON bool, now time.Time) error {
	if asJSON {
		return writeJSON(w, r)
	}
	field := func(k, v string) { fmt.Fprintf(w, "%-10s %s\n", k+":", v) }
	field("ID", r.ID)
	field("Kind", string(r.Kind))
	field("Name", r.Name)
	field("State", string(r.State))
	field("Stage", r.Stage)
	field("Created", r.Created.Format(time.RFC3339Nano))
	field("Updated", r.Updated.Format(time.RFC3339Nano))
	if !r.Deadline.IsZero() {
		field("Deadline", r.Deadline.Format(time.RFC3339Nano))
	}
	if !r.Expiry.IsZero() {
		field("Expiry", r.Expiry.Format(time.RFC3339Nano))
	}
	for k, v := range r.Markers {
		field("Marker", k+"="+v)
	}
	if err := writeTimeline(w, r, now); err != nil {
		return err
	}
	fmt.Fprintln(w, "Steps:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  SEQ\tKIND\tSTATUS\tSTARTED\tFINISHED\tARGS\tERROR")
	for _, s := range r.Steps {
		args, _ := json.Marshal(s.Args)
		finished := ""
		if !s.Finished.IsZero() {
			finished = s.Finished.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Seq, s.Kind, s.Status, s.Started.Format(time.RFC3339Nano), finished, args, s.LastError)
	}
	return tw.Flush()
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
