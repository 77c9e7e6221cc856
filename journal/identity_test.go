package journal

import (
	"errors"
	"testing"
	"time"
)

// beginAs begins a sandbox creation of identity "pod-a" under name, the way a client that
// numbers its attempts asks for one thing under several names.
func beginAs(j *Journal, name string) (Record, error) {
	return j.Begin(BeginRequest{Kind: KindSandbox, Name: name, Identity: "pod-a", Fingerprint: "fp", Stage: "start"})
}

// TestBeginFindsHiddenCreationOfTheSameIdentity: while a creation no caller has been
// answered for (creating, cached) has an identity, a Begin of another name with that
// identity gets it as the holder; once it was answered (created), or is gone, another
// name makes a new record. Another kind, or another identity, is never held.
func TestBeginFindsHiddenCreationOfTheSameIdentity(t *testing.T) {
	tests := []struct {
		name     string
		settle   func(j *Journal, id string) error // nil: left creating
		wantHeld bool
	}{
		{name: "creating", wantHeld: true},
		{name: "cached", wantHeld: true, settle: func(j *Journal, id string) error {
			_, err := j.Settle(id, "obj", false)
			return err
		}},
		{name: "created", settle: func(j *Journal, id string) error {
			_, err := j.Settle(id, "obj", true)
			return err
		}},
		{name: "rolled back", settle: func(j *Journal, id string) error {
			return j.Rollback(t.Context(), id)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, _ := testJournal(t, Options{})
			first, err := beginAs(j, "pod_0")
			if err != nil {
				t.Fatal(err)
			}
			if tt.settle != nil {
				if err := tt.settle(j, first.ID); err != nil {
					t.Fatal(err)
				}
			}
			_, err = beginAs(j, "pod_1")
			var held *HeldError
			if got := errors.As(err, &held); got != tt.wantHeld {
				t.Fatalf("Begin of another name with the same identity = %v, want held %v", err, tt.wantHeld)
			}
			if tt.wantHeld && (held.Holder.ID != first.ID || held.Holder.Name != "pod_0") {
				t.Fatalf("holder = %s %q, want %s %q", held.Holder.ID, held.Holder.Name, first.ID, "pod_0")
			}
			if !tt.wantHeld {
				return
			}
			if _, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: "other_0", Identity: "pod-b", Fingerprint: "fp"}); err != nil {
				t.Fatalf("another identity: %v", err)
			}
			if _, err := j.Begin(BeginRequest{Kind: KindContainer, Name: "pod_1", Identity: "pod-a", Fingerprint: "fp"}); err != nil {
				t.Fatalf("another kind: %v", err)
			}
		})
	}
}

// TestClaimAsRetryName: a retry under another name claims the cached record in one commit
// that renames it, replaces its object and makes it created; the old name is free, the
// new one is held, and a reopened journal (which rebuilds the index from the file)
// agrees, identity included.
func TestClaimAsRetryName(t *testing.T) {
	clock := newFakeClock()
	j, path := testJournal(t, Options{Now: clock.Now, CacheTTL: time.Minute})
	rec, err := beginAs(j, "pod_0")
	if err != nil {
		t.Fatal(err)
	}
	step(t, j, rec.ID, kindA, "1")
	if _, err := j.Settle(rec.ID, map[string]int{"attempt": 0}, false); err != nil {
		t.Fatal(err)
	}
	before := j.Stats().Commits
	claimed, err := j.Claim(ClaimRequest{Kind: KindSandbox, Name: "pod_0", Fingerprint: "fp", As: "pod_1", Object: map[string]int{"attempt": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if n := j.Stats().Commits - before; n != 1 {
		t.Fatalf("Claim took %d commits, want 1", n)
	}
	if claimed.ID != rec.ID || claimed.Name != "pod_1" || claimed.State != StateCreated || string(claimed.Object) != `{"attempt":1}` {
		t.Fatalf("Claim = %s %q %s %s", claimed.ID, claimed.Name, claimed.State, claimed.Object)
	}
	if _, err := j.getByName(KindSandbox, "pod_0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("old name after the claim: %v, want ErrNotFound", err)
	}
	if _, err := beginAs(j, "pod_2"); err != nil {
		t.Fatalf("the claimed record is answered, so another attempt is a new creation: %v", err)
	}
	j.Close()
	reopened, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	got, err := reopened.getByName(KindSandbox, "pod_1")
	if err != nil || got.ID != rec.ID || got.Identity != "pod-a" || got.State != StateCreated {
		t.Fatalf("reopened: %q = %s identity %q state %s, %v", "pod_1", got.ID, got.Identity, got.State, err)
	}
	if _, err := reopened.getByName(KindSandbox, "pod_0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("reopened: old name %v, want ErrNotFound", err)
	}
}

// cachedAs makes a cached creation of identity "pod-a" under name.
func cachedAs(t *testing.T, j *Journal, name string) Record {
	t.Helper()
	rec, err := beginAs(j, name)
	if err != nil {
		t.Fatal(err)
	}
	step(t, j, rec.ID, kindA, "1")
	if _, err := j.Settle(rec.ID, "obj", false); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestClaimAsHeldName: a claim may not take a name another record holds; the cached
// record stays as it was.
func TestClaimAsHeldName(t *testing.T) {
	j, _ := testJournal(t, Options{})
	cachedAs(t, j, "pod_0")
	other := begin(t, j, "taken", time.Time{})
	_, err := j.Claim(ClaimRequest{Kind: KindSandbox, Name: "pod_0", Fingerprint: "fp", As: "taken"})
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.ID != other.ID {
		t.Fatalf("Claim as a held name = %v, want HeldError by %s", err, other.ID)
	}
	if got, err := j.getByName(KindSandbox, "pod_0"); err != nil || got.State != StateCached {
		t.Fatalf("after the refused claim: %s, %v; want still cached", got.State, err)
	}
}

// TestIdentityIndexRebuiltAtOpen: a hidden creation found by identity before a restart
// is found after it.
func TestIdentityIndexRebuiltAtOpen(t *testing.T) {
	j, path := testJournal(t, Options{})
	rec := cachedAs(t, j, "pod_0")
	j.Close()
	reopened, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	_, err = beginAs(reopened, "pod_1")
	var held *HeldError
	if !errors.As(err, &held) || held.Holder.ID != rec.ID {
		t.Fatalf("Begin after reopen = %v, want HeldError by %s", err, rec.ID)
	}
}
