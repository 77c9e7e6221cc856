package journal

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Reading the published records without copying them: Snapshot and Peek, for the
// status and List calls.

// TestSnapshotListsWhatListLists: Snapshot returns the records List returns, in the same
// order, without copying them.
func TestSnapshotListsWhatListLists(t *testing.T) {
	j, _ := testJournal(t, Options{})
	for i := range 5 {
		rec, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: fmt.Sprintf("pod-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Intent(rec.ID, "s", kindA, map[string]string{"i": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	odd := func(r *Record) bool { return r.Steps[0].Args["i"] != "0" }
	if diff := cmp.Diff(j.List(odd), j.Snapshot(odd)); diff != "" {
		t.Fatalf("Snapshot differs from List (-List +Snapshot):\n%s", diff)
	}
	if got := j.Snapshot(func(*Record) bool { return false }); len(got) != 0 {
		t.Fatalf("Snapshot with a filter that keeps nothing: %d records", len(got))
	}
}

// TestPeekGetsWhatGetGets: Peek returns the record Get returns, and the same error for an
// unknown ID; a change after the Peek publishes a new record and leaves the peeked one as it
// was.
func TestPeekGetsWhatGetGets(t *testing.T) {
	j, _ := testJournal(t, Options{})
	rec, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: "pod"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Intent(rec.ID, "s", kindA, map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	peeked, err := j.Peek(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(got, peeked); diff != "" {
		t.Fatalf("Peek differs from Get (-Get +Peek):\n%s", diff)
	}
	v := "v"
	if err := j.SetMarker(rec.ID, "m", &v); err != nil {
		t.Fatal(err)
	}
	if _, ok := peeked.Marker("m"); ok {
		t.Error("a marker set after the Peek shows in the peeked record")
	}
	if now, _ := j.Peek(rec.ID); now.Markers["m"] != "v" {
		t.Error("Peek after SetMarker: marker missing")
	}
	_, gerr := j.Get("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	_, perr := j.Peek("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	if !errors.Is(gerr, ErrNotFound) || !errors.Is(perr, ErrNotFound) {
		t.Errorf("unknown ID: Get %v, Peek %v, want ErrNotFound", gerr, perr)
	}
}

// TestValidIDAsThePattern: ValidID accepts what ^[0-9a-f]{64}$ matched, the pattern it
// replaced, and nothing else.
func TestValidIDAsThePattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[0-9a-f]{64}$`)
	hex := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	ids := []string{"", "a", hex, hex[:63], hex + "0", strings.ToUpper(hex), hex[:63] + "g", hex[:63] + "/", hex[:63] + "\n"}
	for c := range 256 { // every byte at the last place
		ids = append(ids, hex[:63]+string([]byte{byte(c)}))
	}
	for _, id := range ids {
		if got, want := ValidID(id), pattern.MatchString(id); got != want {
			t.Errorf("ValidID(%q) = %v, the pattern %v", id, got, want)
		}
	}
}

// TestSnapshotChildrenListsAParentsRecords: SnapshotChildren returns what Snapshot
// returns of the records of one parent, oldest first, as records are begun, changed and
// removed, and after the file is opened again.
func TestSnapshotChildrenListsAParentsRecords(t *testing.T) {
	j, path := testJournal(t, Options{})
	pods := []string{}
	for i := range 2 {
		pod, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: fmt.Sprintf("pod-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod.ID)
	}
	ctrs := map[string][]string{} // by pod
	for i := range 5 {
		pod := pods[i%2]
		rec, err := j.Begin(BeginRequest{Kind: KindContainer, Name: fmt.Sprintf("ctr-%d", i), Parent: pod})
		if err != nil {
			t.Fatal(err)
		}
		ctrs[pod] = append(ctrs[pod], rec.ID)
	}
	check := func(j *Journal, when string) {
		t.Helper()
		for _, pod := range append(pods, "no-such-pod") {
			of := func(r *Record) bool { return r.Parent == pod }
			want, got := j.Snapshot(of), j.SnapshotChildren(pod, nil)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: SnapshotChildren(%s) differs from Snapshot of its records (-Snapshot +SnapshotChildren):\n%s", when, pod, diff)
			}
			if pod != "no-such-pod" && len(got) != len(ctrs[pod]) {
				t.Errorf("%s: %d records of %s, want %d", when, len(got), pod, len(ctrs[pod]))
			}
		}
	}
	check(j, "begun")
	// A change publishes a new record: the index holds the new one, once.
	if _, err := j.Intent(ctrs[pods[0]][0], "s", kindA, nil); err != nil {
		t.Fatal(err)
	}
	check(j, "changed")
	stepped := func(r *Record) bool { return len(r.Steps) > 0 }
	if got := j.SnapshotChildren(pods[0], stepped); len(got) != 1 || got[0].ID != ctrs[pods[0]][0] {
		t.Errorf("SnapshotChildren with a filter: %d records, want %s alone", len(got), ctrs[pods[0]][0])
	}
	// Records rolled back (deleted) leave it.
	if err := j.Rollback(ctx, ctrs[pods[1]][0]); err != nil {
		t.Fatal(err)
	}
	ctrs[pods[1]] = ctrs[pods[1]][1:]
	check(j, "one removed")
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	check(j2, "reopened")
}
