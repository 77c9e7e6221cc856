package creation

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// TestDecide is Reserve's table of outcomes (decide) row by row: the holder's request
// (same fingerprint, an older format's, or another), its name (the request's, or an
// earlier attempt's found by identity), its state, and whether this request waited on it.
func TestDecide(t *testing.T) {
	req := journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod_1", Identity: "ns/pod/uid", Fingerprint: "fp"}
	older := []string{"fp-v1"}
	holder := func(name, fp string, state journal.State) journal.Record {
		return journal.Record{ID: "h", Kind: journal.KindSandbox, Name: name, Fingerprint: fp, State: state}
	}
	tests := []struct {
		name     string
		holder   journal.Record
		waitedOn string
		want     Outcome
	}{
		{"other request, another name, creating", holder("pod_0", "other", journal.StateCreating), "", Superseded},
		{"other request, another name, cached", holder("pod_0", "other", journal.StateCached), "", Superseded},
		{"other request, this name, created", holder("pod_1", "other", journal.StateCreated), "", NameTaken},
		{"other request, this name, cached", holder("pod_1", "other", journal.StateCached), "", NameTaken},
		{"other request, this name, creating", holder("pod_1", "other", journal.StateCreating), "", NameTaken},
		{"other request, this name, cached, waited on", holder("pod_1", "other", journal.StateCached), "h", NameTaken},
		{"same request, this name, created", holder("pod_1", "fp", journal.StateCreated), "", Duplicate},
		{"same request in an older format, this name, created", holder("pod_1", "fp-v1", journal.StateCreated), "", Duplicate},
		{"same request, this name, created after a wait", holder("pod_1", "fp", journal.StateCreated), "h", Duplicate},
		{"same request, this name, cached", holder("pod_1", "fp", journal.StateCached), "", Claimed},
		{"same request in an older format, cached", holder("pod_1", "fp-v1", journal.StateCached), "", Claimed},
		{"same request, another name, cached", holder("pod_0", "fp", journal.StateCached), "", Claimed},
		{"same request, this name, cached, another waited on", holder("pod_1", "fp", journal.StateCached), "x", Claimed},
		{"same request, this name, cached while waited on", holder("pod_1", "fp", journal.StateCached), "h", KeptForNext},
		{"same request, another name, cached while waited on", holder("pod_0", "fp", journal.StateCached), "h", KeptForNext},
		{"same request, this name, creating", holder("pod_1", "fp", journal.StateCreating), "", Waited},
		{"same request, another name, creating", holder("pod_0", "fp", journal.StateCreating), "", Waited},
		{"same request, this name, ready (older versions)", holder("pod_1", "fp", journal.StateReady), "", Waited},
		{"same request, this name, undoing", holder("pod_1", "fp", journal.StateUndoing), "", Waited},
		{"same request, this name, removing", holder("pod_1", "fp", journal.StateRemoving), "", Waited},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decide(req, older, tt.holder, tt.waitedOn); got != tt.want {
				t.Errorf("decide = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestReserveOutcomes drives each of the seven outcomes through Reserve over a real
// journal: the holder each finds, and what the request gets (the reservation's outcome,
// or the error's class).
func TestReserveOutcomes(t *testing.T) {
	tests := []struct {
		outcome Outcome
		holder  func(t *testing.T, e *Engine) // makes the record the request finds, if any
		during  func(t *testing.T, e *Engine) // runs while the request waits
		req     journal.BeginRequest
		want    Outcome // what the reservation says; Begun also after Waited or Superseded
		wantErr error
		wantMsg string // in the error
	}{
		{outcome: Begun, req: attemptReq("1", "fp"), want: Begun},
		{outcome: Duplicate, req: attemptReq("0", "fp"), want: Duplicate,
			holder: func(t *testing.T, e *Engine) { settleName(t, e, "pod_0", true) }},
		{outcome: Claimed, req: attemptReq("1", "fp"), want: Claimed,
			holder: func(t *testing.T, e *Engine) { settleName(t, e, "pod_0", false) }},
		{outcome: Waited, req: attemptReq("0", "fp"), want: Duplicate,
			during: func(t *testing.T, e *Engine) { settleName(t, e, "pod_0", true) }},
		{outcome: KeptForNext, req: attemptReq("0", "fp"), wantErr: ErrTimedOut, wantMsg: "will be returned on the next retry",
			during: func(t *testing.T, e *Engine) { settleName(t, e, "pod_0", false) }},
		{outcome: Superseded, req: attemptReq("1", "other"), want: Begun,
			holder: func(t *testing.T, e *Engine) { settleName(t, e, "pod_0", false) }},
		{outcome: NameTaken, req: attemptReq("0", "other"), wantErr: ErrNameTaken, wantMsg: "made from a different request",
			holder: func(t *testing.T, e *Engine) { settleName(t, e, "pod_0", true) }},
	}
	for _, tt := range tests {
		t.Run(tt.outcome.String(), func(t *testing.T) {
			e := testEngine(t)
			if tt.outcome != Begun {
				if _, err := e.journal.Begin(attemptReq("0", "fp")); err != nil {
					t.Fatal(err)
				}
			}
			if tt.holder != nil {
				tt.holder(t, e)
			}
			if tt.during != nil {
				go func() {
					time.Sleep(100 * time.Millisecond)
					tt.during(t, e)
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
			defer cancel()
			res, err := e.Reserve(ctx, tt.req, Same{})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
					t.Fatalf("reserve = %+v, %v; want %v saying %q", res, err, tt.wantErr, tt.wantMsg)
				}
				return
			}
			if err != nil || res.Outcome != tt.want {
				t.Fatalf("reserve = %+v, %v; want %v", res, err, tt.want)
			}
			if (res.ExistingID == "") != (tt.want == Begun) {
				t.Errorf("reserve = %+v: an existing ID for %v", res, tt.want)
			}
		})
	}
}

// settleName settles the record that holds name: created (live) or cached (not live).
func settleName(t *testing.T, e *Engine, name string, live bool) {
	t.Helper()
	rec, err := nameHolder(e.journal, journal.KindSandbox, name)
	if err != nil {
		t.Error(err)
		return
	}
	if _, err := e.journal.Settle(rec.ID, map[string]string{}, live); err != nil {
		t.Error(err)
	}
}
