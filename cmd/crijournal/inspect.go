package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crijournal/crijournal/journal"
)

func init() {
	subcommands = append(subcommands, newInspectCommand)
}

func newInspectCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect [ID|NAME|ID-prefix]",
		Short: "Show the journal's records: every creation, its state and steps",
		Long: `inspect opens the journal file read-only (the daemon must be stopped: it holds the
file's lock) and prints every record as a table, or one record with all its steps.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			j, err := journal.Open(cfg.JournalFile(), journal.Options{ReadOnly: true, LockTimeout: cfg.JournalLockTimeout})
			if err != nil {
				return err
			}
			defer j.Close()
			records := j.List(nil)
			if len(args) == 1 {
				rec, err := pickRecord(records, args[0])
				if err != nil {
					return err
				}
				return printRecord(cmd.OutOrStdout(), rec, asJSON)
			}
			return printRecords(cmd.OutOrStdout(), records, asJSON, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
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
		failed := ""
		for _, s := range r.FailedUndos() {
			failed += fmt.Sprintf("%s(next %s) ", s.Kind, s.NextRetry.Format(time.TimeOnly))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Kind, r.ID[:13], r.Name, r.State, r.Stage,
			now.Sub(r.Created).Round(time.Second), expiry, strings.TrimSpace(failed))
	}
	return tw.Flush()
}

func printRecord(w io.Writer, r journal.Record, asJSON bool) error {
	if asJSON {
		return writeJSON(w, r)
	}
	fmt.Fprintf(w, "ID:          %s\nKind:        %s\nName:        %s\nState:       %s\nStage:       %s\nCreated:     %s\nUpdated:     %s\n",
		r.ID, r.Kind, r.Name, r.State, r.Stage, r.Created.Format(time.RFC3339Nano), r.Updated.Format(time.RFC3339Nano))
	if !r.Deadline.IsZero() {
		fmt.Fprintf(w, "Deadline:    %s\n", r.Deadline.Format(time.RFC3339Nano))
	}
	if !r.Expiry.IsZero() {
		fmt.Fprintf(w, "Expiry:      %s\n", r.Expiry.Format(time.RFC3339Nano))
	}
	for k, v := range r.Markers {
		fmt.Fprintf(w, "Marker:      %s=%s\n", k, v)
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
