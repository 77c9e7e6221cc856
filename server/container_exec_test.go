package server

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestExecSlotsRefuseOverTheCap: as many calls as the cap take a slot; one more is
// refused at once with ResourceExhausted, and takes one as soon as a call releases its
// own.
func TestExecSlotsRefuseOverTheCap(t *testing.T) {
	for _, n := range []int{1, 3} {
		slots := make(execSlots, n)
		var releases []func()
		for i := range n {
			release, err := slots.take()
			if err != nil {
				t.Fatalf("cap %d: call %d refused: %v", n, i+1, err)
			}
			releases = append(releases, release)
		}
		_, err := slots.take()
		if code := status.Code(toStatus(err)); code != codes.ResourceExhausted {
			t.Fatalf("cap %d: call %d: %v (code %v), want ResourceExhausted", n, n+1, err, code)
		}
		releases[0]()
		release, err := slots.take()
		if err != nil {
			t.Fatalf("cap %d: refused after a release: %v", n, err)
		}
		release()
	}
	if release, err := execSlots(nil).take(); err != nil {
		t.Errorf("no slots (no cap) refused: %v", err)
	} else {
		release()
	}
}
