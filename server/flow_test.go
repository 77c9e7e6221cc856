package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
)

// The server's tests of what follows a creation (events, NRI, lists) drive the creation
// engine with fake steps: no root, no namespaces, no runtime. Each fake step records its
// undo by kind in the journal like a real one. The engine's own tests are package
// creation's.

func testServer(t *testing.T) *Server {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{Logger: log, CacheTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if problems := j.Check(); len(problems) > 0 {
			t.Errorf("journal check: %v", problems)
		}
		j.Close()
	})
	return &Server{journal: j, log: log, creations: creation.New(j, log, nil)}
}

func beginReq(name, fp string) journal.BeginRequest {
	return journal.BeginRequest{Kind: journal.KindSandbox, Name: name, Fingerprint: fp, Stage: "test stage"}
}

// settle drives a record to created (live) or cached (not live).
func settle(t *testing.T, s *Server, id string, live bool) {
	t.Helper()
	if _, err := s.journal.Settle(id, map[string]string{}, live); err != nil {
		t.Fatal(err)
	}
}

const (
	fakeFirst  journal.StepKind = "fake-first"
	fakeSecond journal.StepKind = "fake-second"
)

// undoFake is the undo of the fake step kinds: nothing to undo.
func undoFake(context.Context, journal.Record, journal.Step) error { return nil }

// flowServer returns a server over a journal whose registry undoes the fake step kinds.
func flowServer(t *testing.T) *Server {
	t.Helper()
	reg := journal.NewRegistry()
	reg.Register(fakeFirst, undoFake)
	reg.Register(fakeSecond, undoFake)
	log := slog.New(slog.DiscardHandler)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{Logger: log, CacheTTL: time.Minute, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Deps{Journal: j, Log: log})
	t.Cleanup(func() {
		s.Close()
		if problems := j.Check(); len(problems) > 0 {
			t.Errorf("journal check: %v", problems)
		}
		j.Close()
	})
	return s
}

// fakeStep is a step of kind that makes thing: run is its action.
func fakeStep[T any](kind journal.StepKind, thing string, run func(ctx context.Context) (T, error)) journal.Action[T] {
	return journal.Action[T]{Kind: kind, Stage: "making " + thing, Args: map[string]string{"thing": thing}, Run: run}
}

func returns[T any](v T) func(context.Context) (T, error) {
	return func(context.Context) (T, error) { return v, nil }
}

func fails(err error) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { return 0, err }
}

func beginFlow(t *testing.T, s *Server, ctx context.Context, name string) *creation.Creation {
	t.Helper()
	c, existing, err := s.creations.Begin(ctx, "test-create", journal.BeginRequest{Kind: journal.KindSandbox, Name: name, Fingerprint: "fp", Stage: "reserve"}, creation.Same{})
	if err != nil || c == nil {
		t.Fatalf("begin = %v, %q, %v; want a new creation", c, existing.ExistingID, err)
	}
	return c
}

var long = creation.Limit{Max: time.Minute}
