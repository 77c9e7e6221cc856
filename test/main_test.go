// Package test holds crijournal's end-to-end tests: each test starts its own
// daemon (bin/crijournal, or one built from this module) with its own
// directories, CNI bridge and subnet, and drives it with the real crictl.
//
// The tests need root, crictl, nsenter, ip and the reference CNI plugins in
// /usr/lib/cni. Without them they are skipped, except under CI=true, where a
// missing prerequisite fails the test.
package test

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	for _, dir := range sweepStaleNodes() {
		fmt.Fprintf(os.Stderr, "e2e: removed %s, left by a test process that died\n", dir)
	}
	before := takeNodeState()
	code := m.Run()
	if left := takeNodeState().leftSince(before); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: the tests left on the machine (not there before them):\n  %s\n", strings.Join(left, "\n  "))
		if code == 0 {
			code = 1
		}
	}
	// A test that failed badly (a panic in a helper, a t.Fatal between start
	// and cleanup registration) must not leave a daemon running.
	if pids := killStrayDaemons(); len(pids) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: killed daemons still running after the tests: %v\n", pids)
		if code == 0 {
			code = 1
		}
	}
	removeBuiltBinary()
	os.Exit(code)
}
