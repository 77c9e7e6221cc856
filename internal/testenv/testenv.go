// Package testenv holds what the tests that use the machine share: the rule for a
// missing prerequisite (root, a tool, a package), which fails the test under CI
// (CI=true), where every prerequisite must be installed, so that CI never passes by
// skipping, and skips it elsewhere; and random names for what tests make on the node.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
)

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Need stops the test for a missing prerequisite: it fails under CI and skips
// elsewhere. The message says what is missing and how to get it.
func Need(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf(format+" (CI=true: every prerequisite must be installed)", args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot stops the test (see Need) unless it runs as root; who names the tests
// and why, as in "netns tests pin namespaces".
func RequireRoot(t testing.TB, who string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Need(t, "%s: they need root; run them as root", who)
	}
}

// RandomHex returns n random bytes as hex: names of bridges, IDs, UIDs that no other
// test (or test run) uses.
func RandomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
