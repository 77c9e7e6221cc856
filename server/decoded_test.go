package server

import (
	"encoding/json"
	"testing"

	"github.com/crijournal/crijournal/journal"
)

// TestDecodeCacheAnswersOnlyForTheSameObject: a cached entry is used while the record's
// object is byte for byte the one decoded; a changed object is decoded again, and
// keepOnly drops the entries of records that are gone.
func TestDecodeCacheAnswersOnlyForTheSameObject(t *testing.T) {
	var c decodeCache[string]
	decodes := 0
	decode := countingDecode(&decodes)
	rec := journal.Record{ID: "a", Object: json.RawMessage(`"one"`)}
	for range 3 {
		if v, err := c.get(rec, decode); err != nil || v != "one" {
			t.Fatalf("get = %q, %v; want one", v, err)
		}
	}
	if decodes != 1 {
		t.Fatalf("%d decodes of an unchanged object, want 1", decodes)
	}
	rec.Object = json.RawMessage(`"two"`)
	if v, _ := c.get(rec, decode); v != "two" || decodes != 2 {
		t.Fatalf("after the object changed: %q after %d decodes, want two after 2", v, decodes)
	}
	if _, err := c.get(journal.Record{ID: "bad", Object: json.RawMessage(`{`)}, decode); err == nil {
		t.Fatal("a bad object decoded")
	}
	if _, ok := c.entries["bad"]; ok {
		t.Fatal("a decode error was cached")
	}
	c.keepOnly(nil)
	if len(c.entries) != 0 {
		t.Fatalf("keepOnly(nil) left %d entries", len(c.entries))
	}
}

// TestDecodeCacheViewDoesNotStore: view answers from an entry that holds the very object,
// decodes a changed or unknown one without storing it, so only get (the List calls) fills
// the cache.
func TestDecodeCacheViewDoesNotStore(t *testing.T) {
	var c decodeCache[string]
	decodes := 0
	decode := countingDecode(&decodes)
	rec := journal.Record{ID: "a", Object: json.RawMessage(`"one"`)}
	for _, step := range []struct {
		name    string
		call    func(journal.Record, func(journal.Record) (string, error)) (string, error)
		obj     string
		want    string
		decodes int
		entries int
	}{
		{"view of an unknown record decodes", c.view, `"one"`, "one", 1, 0},
		{"and again: nothing was stored", c.view, `"one"`, "one", 2, 0},
		{"get stores", c.get, `"one"`, "one", 3, 1},
		{"view of the stored object does not decode", c.view, `"one"`, "one", 3, 1},
		{"view of a changed object decodes", c.view, `"two"`, "two", 4, 1},
		{"and leaves the old entry", c.view, `"one"`, "one", 4, 1},
	} {
		rec.Object = json.RawMessage(step.obj)
		v, err := step.call(rec, decode)
		if err != nil || v != step.want || decodes != step.decodes || len(c.entries) != step.entries {
			t.Fatalf("%s: %q, %v after %d decodes with %d entries; want %q after %d with %d",
				step.name, v, err, decodes, len(c.entries), step.want, step.decodes, step.entries)
		}
	}
}

// countingDecode decodes a record's object as a JSON string, counting its calls in n.
func countingDecode(n *int) func(journal.Record) (string, error) {
	return func(r journal.Record) (string, error) {
		*n++
		var v string
		err := json.Unmarshal(r.Object, &v)
		return v, err
	}
}
