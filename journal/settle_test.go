package journal

import (
	"errors"
	"testing"
	"time"
)

// TestSettleIsOneCommit: Settle stores the object and the answer in one durable commit
// (the last step's done mark riding on it), for a live request (created) and for one
// past its deadline (cached, with an expiry); what it committed is what a reopened
// journal reads.
func TestSettleIsOneCommit(t *testing.T) {
	for _, live := range []bool{true, false} {
		t.Run(map[bool]string{true: "live", false: "past its deadline"}[live], func(t *testing.T) {
			clock := newFakeClock()
			j, path := testJournal(t, Options{Now: clock.Now, CacheTTL: time.Minute})
			rec := begin(t, j, "pod", clock.Now().Add(time.Minute))
			step(t, j, rec.ID, kindA, "1")
			step(t, j, rec.ID, kindB, "2")
			before := j.Stats().Commits
			got, err := j.Settle(rec.ID, map[string]string{"ip": "10.0.0.2"}, live)
			if err != nil {
				t.Fatal(err)
			}
			if n := j.Stats().Commits - before; n != 1 {
				t.Fatalf("Settle took %d commits, want 1", n)
			}
			want, expiry := StateCreated, time.Time{}
			if !live {
				want, expiry = StateCached, clock.Now().Add(time.Minute)
			}
			if got.State != want || !got.Expiry.Equal(expiry) || string(got.Object) != `{"ip":"10.0.0.2"}` || got.Stage != "" || !got.AllDone() {
				t.Fatalf("after Settle(%v) = state %s expiry %v object %s stage %q steps %+v", live, got.State, got.Expiry, got.Object, got.Stage, got.Steps)
			}
			j.Close()
			reopened, err := Open(path, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer reopened.Close()
			onDisk, err := reopened.Get(rec.ID)
			if err != nil || onDisk.State != want || !onDisk.AllDone() || string(onDisk.Object) != `{"ip":"10.0.0.2"}` {
				t.Fatalf("on disk after Settle: %+v, %v", onDisk, err)
			}
		})
	}
}

// TestSettleRefusesWhatIsNotFinished: only a creating record whose steps are all done
// can be settled.
func TestSettleRefusesWhatIsNotFinished(t *testing.T) {
	j, _ := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Time{})
	if _, err := j.Intent(rec.ID, "s", kindA, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Settle(rec.ID, "obj", true); !errors.Is(err, ErrWrongState) {
		t.Fatalf("Settle with a step in intent = %v, want ErrWrongState", err)
	}
	if err := j.Done(rec.ID, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Settle(rec.ID, "obj", true); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Settle(rec.ID, "obj", true); !errors.Is(err, ErrWrongState) {
		t.Fatalf("Settle of a created record = %v, want ErrWrongState", err)
	}
	if _, err := j.Settle("0000000000000000000000000000000000000000000000000000000000000000", "obj", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Settle of an unknown record = %v, want ErrNotFound", err)
	}
}
