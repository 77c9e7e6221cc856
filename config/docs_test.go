package config

import (
	"strings"
	"testing"
)

// TestTOMLDocumentsEveryKey: `crijournal config` prints, before every key, the doc comment
// of its field (with the key's name for the field's), so the file is self-describing.
func TestTOMLDocumentsEveryKey(t *testing.T) {
	data, err := Default().TOML()
	if err != nil {
		t.Fatal(err)
	}
	out := string(data)
	keys := []string{"runtimes", "registries"}
	for _, f := range scalarFields {
		keys = append(keys, f.key)
	}
	for _, key := range keys {
		doc := keyDocs()[key]
		if len(doc) < 1 || !strings.HasPrefix(doc[0], key+" ") {
			t.Errorf("key %s: doc comment %q does not start with the key", key, doc)
			continue
		}
		if !strings.Contains(out, "# "+strings.Join(doc, "\n# ")+"\n") {
			t.Errorf("TOML() does not print the doc of %s:\n%s", key, strings.Join(doc, "\n"))
		}
	}
}
