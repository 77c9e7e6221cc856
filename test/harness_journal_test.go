package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// Helpers that read a daemon's journal: from its file while it is stopped, or
// the container records while it runs.

// records reads every record of the journal file. The daemon must be
// stopped: it holds the file's lock while it runs.
func (d *daemon) records(t *testing.T) []journal.Record {
	t.Helper()
	j := d.openJournal(t)
	defer j.Close()
	return j.List(nil)
}

// checkJournal fails the test if bbolt's consistency check or the journal's
// invariants find a problem. The daemon must be stopped.
func (d *daemon) checkJournal(t *testing.T) {
	t.Helper()
	j := d.openJournal(t)
	defer j.Close()
	for _, err := range j.Check() {
		t.Errorf("journal %s: %v", d.journalPath(), err)
	}
}

func (d *daemon) journalPath() string { return d.node.JournalFile() }

func (d *daemon) openJournal(t *testing.T) *journal.Journal {
	t.Helper()
	if alive, _ := d.running(); alive {
		t.Fatal("the journal can only be read while the daemon is stopped")
	}
	j, err := journal.Open(d.journalPath(), journal.Options{ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open the journal: %v", err)
	}
	return j
}

func describeRecord(r journal.Record) string {
	return fmt.Sprintf("%s %s %q state %s stage %q holds name %v, %d steps", r.Kind, r.ID, r.Name, r.State, r.Stage, r.HoldsName, len(r.Steps))
}

// containerRecords returns the container records of the live journal.
func (d *daemon) containerRecords(t *testing.T) []journal.Record {
	t.Helper()
	var out []journal.Record
	for _, r := range d.liveRecords(t) {
		if r.Kind == journal.KindContainer {
			out = append(out, r)
		}
	}
	return out
}

// waitContainerRecord waits until the live journal holds exactly one
// container record, and cond holds for it, and returns it.
func (d *daemon) waitContainerRecord(t *testing.T, what string, within time.Duration, cond func(journal.Record) bool) journal.Record {
	t.Helper()
	var recs []journal.Record
	testenv.Eventually(t, within, 50*time.Millisecond, func() error {
		recs = d.containerRecords(t)
		if len(recs) == 1 && cond(recs[0]) {
			return nil
		}
		var got []string
		for _, r := range recs {
			got = append(got, describeSteps(r))
		}
		return fmt.Errorf("no container record %s within %v; container records: %q", what, within, got)
	})
	return recs[0]
}

// describeSteps describes a record with its steps.
func describeSteps(r journal.Record) string {
	var steps []string
	for _, s := range r.Steps {
		steps = append(steps, fmt.Sprintf("%s:%s", s.Kind, s.Status))
	}
	return fmt.Sprintf("%s %s %q state %s holds name %v, steps [%s]", r.Kind, r.ID, r.Name, r.State, r.HoldsName, strings.Join(steps, " "))
}

// liveRecords returns the records of the running daemon's journal, as
// crijournal inspect --json reads them over the inspection socket.
func (d *daemon) liveRecords(t *testing.T) []journal.Record {
	t.Helper()
	if alive, _ := d.running(); !alive {
		t.Fatal("liveRecords: the daemon is not running")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, daemonBinary(t), "inspect", "--json", "--config", d.configPath)
	cmd.Env = daemonEnv(nil)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("crijournal inspect --json: %v\n%s", err, stderr.String())
	}
	var recs []journal.Record
	if err := json.Unmarshal(stdout.Bytes(), &recs); err != nil {
		t.Fatalf("crijournal inspect --json: %v\n%s", err, stdout.String())
	}
	return recs
}
