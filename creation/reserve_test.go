package creation

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

func testEngine(t *testing.T) *Engine {
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
	return New(j, log, nil)
}

func beginReq(name, fp string) journal.BeginRequest {
	return journal.BeginRequest{Kind: journal.KindSandbox, Name: name, Fingerprint: fp, Stage: "test stage"}
}

// settle drives a record to created (live) or cached (not live).
func settle(t *testing.T, s *Engine, id string, live bool) {
	t.Helper()
	if _, err := s.journal.Settle(id, map[string]string{}, live); err != nil {
		t.Fatal(err)
	}
}

func TestReserveSettlesFromTheHolder(t *testing.T) {
	tests := []struct {
		name     string
		holder   func(t *testing.T, s *Engine) string // makes the holder, returns its ID
		fp       string
		wantSame bool  // the answer is the holder's ID
		wantErr  error // the class of the error, nil for none
		// wantFreed: the holder was rolled back, and the next request takes the name.
		wantFreed bool
	}{
		{name: "created, same request: true duplicate", fp: "fp", wantSame: true,
			holder: func(t *testing.T, s *Engine) string {
				r, _ := s.journal.Begin(beginReq("pod", "fp"))
				settle(t, s, r.ID, true)
				return r.ID
			}},
		{name: "cached, same request: claimed", fp: "fp", wantSame: true,
			holder: func(t *testing.T, s *Engine) string {
				r, _ := s.journal.Begin(beginReq("pod", "fp"))
				settle(t, s, r.ID, false)
				return r.ID
			}},
		{name: "cached, different request: rolled back, AlreadyExists, the next request takes the name", fp: "other",
			wantErr: ErrNameTaken, wantFreed: true,
			holder: func(t *testing.T, s *Engine) string {
				r, _ := s.journal.Begin(beginReq("pod", "fp"))
				settle(t, s, r.ID, false)
				return r.ID
			}},
		{name: "created, different request: AlreadyExists", fp: "other", wantErr: ErrNameTaken,
			holder: func(t *testing.T, s *Engine) string {
				r, _ := s.journal.Begin(beginReq("pod", "fp"))
				settle(t, s, r.ID, true)
				return r.ID
			}},
		{name: "creating, different request: AlreadyExists", fp: "other", wantErr: ErrNameTaken,
			holder: func(t *testing.T, s *Engine) string {
				r, _ := s.journal.Begin(beginReq("pod", "fp"))
				return r.ID
			}},
		{name: "creating, same request, never finishes: DeadlineExceeded naming the stage", fp: "fp", wantErr: ErrTimedOut,
			holder: func(t *testing.T, s *Engine) string {
				r, _ := s.journal.Begin(beginReq("pod", "fp"))
				return r.ID
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testEngine(t)
			holder := tt.holder(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			res, err := s.Reserve(ctx, beginReq("pod", tt.fp), Same{})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("reserve = %v, want %v", err, tt.wantErr)
				}
				if tt.wantErr == ErrTimedOut && !strings.Contains(err.Error(), "test stage") {
					t.Errorf("message %q does not name the stage", err)
				}
				if tt.wantFreed {
					if !strings.Contains(err.Error(), "rolled back") {
						t.Errorf("message %q does not say the holder was rolled back", err)
					}
					if _, err := s.journal.Get(holder); !errors.Is(err, journal.ErrNotFound) {
						t.Errorf("the cached holder was not rolled back: %v", err)
					}
					res, err := s.Reserve(ctx, beginReq("pod", tt.fp), Same{})
					if err != nil || res.ExistingID != "" || res.Record.State != journal.StateCreating {
						t.Errorf("the next request: reservation %+v, %v; want a new record", res, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantSame && res.ExistingID != holder {
				t.Errorf("answered %q, want the holder %s", res.ExistingID, holder)
			}
		})
	}
}

// TestWaiterGetsANormallyCreatedRecord: a retry waiting on an in-progress creation gets its
// ID at once when that creation's own request succeeds.
func TestWaiterGetsANormallyCreatedRecord(t *testing.T) {
	s := testEngine(t)
	holder, _ := s.journal.Begin(beginReq("pod", "fp"))
	go func() {
		time.Sleep(100 * time.Millisecond)
		s.journal.Settle(holder.ID, 1, true)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	res, err := s.Reserve(ctx, beginReq("pod", "fp"), Same{})
	if err != nil || res.ExistingID != holder.ID {
		t.Fatalf("reserve = %+v, %v; want the holder's ID", res, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("the waiter was not woken (waited %v)", waited)
	}
}

// TestWaiterDoesNotTakeWhatBecameCached: when the creation finishes after its own request's
// deadline while a retry waits, the retry still fails (the next one gets it), and the
// cached record's expiry is pushed past the waiter's deadline.
func TestWaiterDoesNotTakeWhatBecameCached(t *testing.T) {
	s := testEngine(t)
	holder, _ := s.journal.Begin(beginReq("pod", "fp"))
	go func() {
		time.Sleep(100 * time.Millisecond)
		s.journal.Settle(holder.ID, 1, false)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := s.Reserve(ctx, beginReq("pod", "fp"), Same{})
	if !errors.Is(err, ErrTimedOut) || !strings.Contains(err.Error(), "next retry") {
		t.Fatalf("reserve = %v, want ErrTimedOut saying the next retry gets it", err)
	}
	rec, err := s.journal.Get(holder.ID)
	if err != nil || rec.State != journal.StateCached {
		t.Fatalf("holder after the waiter gave up: %+v, %v; want cached", rec, err)
	}
	deadline, _ := ctx.Deadline()
	if !rec.Expiry.After(deadline) {
		t.Errorf("expiry %v is not past the waiter's deadline %v", rec.Expiry, deadline)
	}
	// The next retry claims it.
	res, err := s.Reserve(context.Background(), beginReq("pod", "fp"), Same{})
	if err != nil || res.ExistingID != holder.ID {
		t.Fatalf("next retry = %+v, %v; want the cached holder", res, err)
	}
}
