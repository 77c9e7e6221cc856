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
	decode := func(r journal.Record) (string, error) {
		decodes++
		var v string
		err := json.Unmarshal(r.Object, &v)
		return v, err
	}
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
