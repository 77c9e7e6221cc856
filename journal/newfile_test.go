package journal

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestNewPath: the directories whose entries a new journal file adds, deepest first, so
// that Open fsyncs each of them once the file exists.
func TestNewPath(t *testing.T) {
	root := t.TempDir()
	existing := filepath.Join(root, "journal.db")
	if err := os.WriteFile(existing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path string
		want       []string
	}{
		{"file exists", existing, nil},
		{"file missing", filepath.Join(root, "new.db"), []string{root}},
		{"directories missing", filepath.Join(root, "a", "b", "j.db"),
			[]string{filepath.Join(root, "a", "b"), filepath.Join(root, "a"), root}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newPath(tt.path)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("newPath(%s) = %v, want %v", tt.path, got, tt.want)
			}
		})
	}
	// Open of a file in missing directories makes them, syncs them, and the journal is
	// there.
	path := filepath.Join(root, "x", "y", "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}
