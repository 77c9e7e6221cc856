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
