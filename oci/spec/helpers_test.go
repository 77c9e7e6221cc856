package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// requireInvalidSpec requires err to be ErrInvalidSpec with a message that contains want.
func requireInvalidSpec(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrInvalidSpec) || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want ErrInvalidSpec saying %q", err, want)
	}
}
