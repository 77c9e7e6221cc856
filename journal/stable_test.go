package journal

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/migrations"
)

// TestStoredStringsAreStable pins every string the journal stores: renaming a state, a
// step status, a bucket or the name key's layout would make existing files unreadable
// without a migration. Step kinds are pinned where they are defined (server's tests).
func TestStoredStringsAreStable(t *testing.T) {
	for got, want := range map[string]string{
		string(KindSandbox): "sandbox", string(KindContainer): "container",
		string(StateCreating): "creating", string(StateReady): "ready", string(StateCached): "cached",
		string(StateCreated): "created", string(StateUndoing): "undoing", string(StateRemoving): "removing",
		string(StepIntent): "intent", string(StepDone): "done", string(StepUndone): "undone",
		string(StepUndoFailed):        "undo-failed",
		string(migrations.BucketMeta): "meta", string(migrations.BucketRecords): "records",
		string(migrations.BucketNames):                                                  "names",
		string(nameKey(KindContainer, "k8s_c_p_ns_uid_0")):                              "container/k8s_c_p_ns_uid_0",
		string(migrations.RecordKey(strings.Repeat("a", 32) + strings.Repeat("b", 32))): strings.Repeat("b", 32) + strings.Repeat("a", 32),
	} {
		if got != want {
			t.Errorf("stored string %q, was %q: a rename needs a migration", got, want)
		}
	}
}

// TestRecordEncodingIsStable decodes a record as schema version 1 stores it
// (testdata/record-v1.json) and encodes it back byte for byte.
func TestRecordEncodingIsStable(t *testing.T) {
	path := filepath.Join("testdata", "record-v1.json")
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	want := Record{
		ID: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Kind: KindContainer,
		Name: "k8s_c_pod_ns_uid_0", Parent: "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210",
		Fingerprint: "fp", State: StateUndoing, Stage: "undo",
		Deadline: at.Add(4 * time.Minute), Created: at, Updated: at.Add(time.Second),
		Steps: []Step{
			{Seq: 0, Kind: "storage-container", Stage: "container storage creation", Args: map[string]string{"id": "x"},
				Status: StepUndone, Started: at, Finished: at.Add(time.Second)},
			{Seq: 1, Kind: "oci-container", Args: map[string]string{"handler": "runc", "id": "x"},
				Status: StepUndoFailed, Started: at, Finished: at.Add(2 * time.Second), UndoAttempts: 2,
				NextRetry: at.Add(time.Minute), LastError: "runc delete: boom"},
		},
		Markers:   map[string]string{"stopped": "2026-11-30T10:00:01Z"},
		Object:    json.RawMessage(`{"handler":"runc"}`),
		HoldsName: false,
	}
	if testenv.Updating() { // only for a new schema version, with its migration
		b, err := encodeRecord(&want)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	golden = bytes.TrimSpace(golden)
	got, err := DecodeRecord(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decoding the stored record (-want +got):\n%s", diff)
	}
	b, err := encodeRecord(&want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, golden) {
		t.Errorf("encoding changed: a stored field was renamed or retyped (needs a migration):\ngot  %s\nwant %s", b, golden)
	}
}
