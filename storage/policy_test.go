package storage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyContext reads the signature policy at every pull: a missing or broken file is
// an error that names it (a missing one also says how to get the default), and an edit
// applies to the next pull.
func TestPolicyContext(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.json")
	s := &Store{policyPath: path}

	_, err := s.policyContext()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "make install") {
		t.Errorf("policyContext without the file = %v, want an error naming %s and make install", err, path)
	}

	if err := os.WriteFile(path, []byte(`{"default": [{"type": "nonsense"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.policyContext(); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("policyContext with an invalid policy = %v, want an error naming %s", err, path)
	}

	if err := os.WriteFile(path, []byte(`{"default": [{"type": "reject"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	pc, err := s.policyContext() // the edit applies at once
	if err != nil {
		t.Fatalf("policyContext after the policy was fixed: %v", err)
	}
	pc.Destroy()

	// Empty means the built-in accept-anything policy, for tests and embedders.
	if pc, err := (&Store{}).policyContext(); err != nil {
		t.Errorf("policyContext with no policy file configured = %v", err)
	} else {
		pc.Destroy()
	}
}
