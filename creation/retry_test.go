package creation

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// attemptReq is a request for the pod "pod" under the name of one attempt, as a client
// that numbers its attempts (the kubelet) asks for the same thing under several names.
func attemptReq(attempt, fp string) journal.BeginRequest {
	return journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod_" + attempt, Identity: "ns/pod/uid", Fingerprint: fp, Stage: "test stage"}
}

// asRetriedMark is a Same whose claims record the object {"claimed by": name}.
func asRetriedMark(name string) Same {
	return Same{AsRetried: func(made journal.Record) (any, error) {
		return map[string]string{"claimed by": name, "made as": made.Name}, nil
	}}
}

// TestReserveFindsEarlierAttempt: a request under a new attempt's name finds the hidden
// creation of the same thing made under an earlier one, and settles from it as a retry
// under the same name would: it claims it when cached (the record takes the new name and
// the object asRetried gives, in one commit), waits for it while it is being made, and
// fails at its deadline when it became cached meanwhile (the next retry gets it). One
// that asks for something else rolls a cached one back and makes its own; an answered
// one (created) is another container's, and the new attempt makes its own.
func TestReserveFindsEarlierAttempt(t *testing.T) {
	tests := []struct {
		name    string
		fp      string
		holder  func(t *testing.T, s *Engine, id string) // drives the attempt-0 record
		during  func(t *testing.T, s *Engine, id string) // runs while the request waits
		want    string                                   // "claimed", "new", "waits"
		wantErr error
	}{
		{name: "cached, same request: claimed under the new name", fp: "fp", want: "claimed",
			holder: func(t *testing.T, s *Engine, id string) { settle(t, s, id, false) }},
		{name: "cached, different request: rolled back, a new creation", fp: "other", want: "new",
			holder: func(t *testing.T, s *Engine, id string) { settle(t, s, id, false) }},
		{name: "created (answered): a new creation", fp: "fp", want: "new",
			holder: func(t *testing.T, s *Engine, id string) { settle(t, s, id, true) }},
		{name: "creating, same request, never finishes: waits, DeadlineExceeded", fp: "fp", want: "waits",
			wantErr: ErrTimedOut},
		{name: "creating, same request, cached while waiting: DeadlineExceeded, kept for the next", fp: "fp", want: "waits",
			wantErr: ErrTimedOut, during: func(t *testing.T, s *Engine, id string) { settle(t, s, id, false) }},
		{name: "creating, same request, created while waiting: a new creation", fp: "fp", want: "new",
			during: func(t *testing.T, s *Engine, id string) { settle(t, s, id, true) }},
		{name: "creating, different request, created while waiting: a new creation", fp: "other", want: "new",
			during: func(t *testing.T, s *Engine, id string) { settle(t, s, id, true) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testEngine(t)
			first, err := s.journal.Begin(attemptReq("0", "fp"))
			if err != nil {
				t.Fatal(err)
			}
			if tt.holder != nil {
				tt.holder(t, s, first.ID)
			}
			if tt.during != nil {
				go func() {
					time.Sleep(100 * time.Millisecond)
					tt.during(t, s, first.ID)
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
			defer cancel()
			res, err := s.Reserve(ctx, attemptReq("1", tt.fp), asRetriedMark("pod_1"))
			if err != nil && !errors.Is(err, tt.wantErr) || err == nil && tt.wantErr != nil {
				t.Fatalf("reserve = %+v, %v; want code %v", res, err, tt.wantErr)
			}
			switch tt.want {
			case "claimed":
				if res.ExistingID != first.ID || !(res.Outcome == Claimed) {
					t.Fatalf("reserve = %+v, want the claimed %s", res, first.ID)
				}
				rec, err := nameHolder(s.journal, journal.KindSandbox, "pod_1")
				if err != nil || rec.ID != first.ID || rec.State != journal.StateCreated ||
					string(rec.Object) != `{"claimed by":"pod_1","made as":"pod_0"}` {
					t.Fatalf("pod_1 = %s %s %s, %v; want %s created with the retry's object", rec.ID, rec.State, rec.Object, err, first.ID)
				}
				if _, err := nameHolder(s.journal, journal.KindSandbox, "pod_0"); !errors.Is(err, journal.ErrNotFound) {
					t.Fatalf("pod_0 after the claim: %v, want free", err)
				}
			case "new":
				if res.Record.ID == "" || res.Record.ID == first.ID || res.Record.Name != "pod_1" {
					t.Fatalf("reserve = %+v, want a new record under pod_1", res)
				}
			case "waits":
				if res.Record.ID != "" || res.ExistingID != "" {
					t.Fatalf("reserve = %+v, want nothing", res)
				}
				if rec, err := s.journal.Get(first.ID); err != nil || rec.Name != "pod_0" {
					t.Fatalf("attempt 0 after the wait: %+v, %v; want it kept under its name", rec, err)
				}
			}
			if tt.fp != "fp" && tt.holder != nil && tt.want == "new" {
				if _, err := s.journal.Get(first.ID); !errors.Is(err, journal.ErrNotFound) {
					t.Fatalf("the cached attempt 0 asked for differently: %v, want rolled back", err)
				}
			}
		})
	}
}

// TestWaiterDoesNotTakeWhatBecameCachedThenNextRetryDoes: the seed's three-request rule
// across attempts. The request that waited on attempt 0 fails although it became cached
// under it; the next request, under yet another name, claims it: one creation served
// three requests.
func TestWaiterDoesNotTakeWhatBecameCachedThenNextRetryDoes(t *testing.T) {
	s := testEngine(t)
	first, err := s.journal.Begin(attemptReq("0", "fp"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		settle(t, s, first.ID, false)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if res, err := s.Reserve(ctx, attemptReq("1", "fp"), asRetriedMark("pod_1")); !errors.Is(err, ErrTimedOut) {
		t.Fatalf("the waiting retry = %+v, %v; want DeadlineExceeded", res, err)
	}
	res, err := s.Reserve(context.Background(), attemptReq("1", "fp"), asRetriedMark("pod_1"))
	if err != nil || res.ExistingID != first.ID || !(res.Outcome == Claimed) {
		t.Fatalf("the next retry = %+v, %v; want the claimed %s", res, err, first.ID)
	}
}

// nameHolder returns the record that holds a name, or ErrNotFound when the name is free.
func nameHolder(j *journal.Journal, kind journal.Kind, name string) (journal.Record, error) {
	recs := j.List(func(r *journal.Record) bool { return r.Kind == kind && r.Name == name && r.HoldsName })
	if len(recs) == 0 {
		return journal.Record{}, fmt.Errorf("%s %q: %w", kind, name, journal.ErrNotFound)
	}
	return recs[0], nil
}
