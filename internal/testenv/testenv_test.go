package testenv

import (
	"errors"
	"os"
	"slices"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	tests := []struct {
		name    string
		okAfter int // calls until cond holds; 0: never
		wantErr bool
	}{
		{name: "holds at once", okAfter: 1},
		{name: "holds after a few polls", okAfter: 3},
		{name: "never holds", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := Poll(200*time.Millisecond, time.Millisecond, func() error {
				calls++
				if tt.okAfter > 0 && calls >= tt.okAfter {
					return nil
				}
				return errors.New("not yet")
			})
			if (err != nil) != tt.wantErr {
				t.Fatalf("Poll returned %v after %d calls, want an error: %v", err, calls, tt.wantErr)
			}
			if tt.okAfter > 0 && calls != tt.okAfter {
				t.Errorf("cond was called %d times, want %d", calls, tt.okAfter)
			}
			if tt.wantErr && (err.Error() != "not yet" || calls < 2) {
				t.Errorf("Poll returned %v after %d calls, want cond's last error after several", err, calls)
			}
		})
	}
}

func TestWithin(t *testing.T) {
	broke := errors.New("broke")
	release := make(chan struct{})
	defer close(release)
	for _, tt := range []struct {
		name string
		f    func() error
		want error
	}{
		{name: "returns nil", f: func() error { return nil }},
		{name: "returns its error", f: func() error { return broke }, want: broke},
		{name: "does not return in time", f: func() error { <-release; return nil }, want: ErrTimedOut},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := Within(50*time.Millisecond, tt.f); !errors.Is(err, tt.want) || (err == nil) != (tt.want == nil) {
				t.Errorf("Within = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestUntil(t *testing.T) {
	if err := Until("x", func() bool { return true })(); err != nil {
		t.Errorf("Until of a predicate that holds: %v", err)
	}
	if err := Until("the answer", func() bool { return false })(); err == nil || err.Error() != "still waiting for the answer" {
		t.Errorf("Until of a predicate that does not hold: %v", err)
	}
}

func TestProc(t *testing.T) {
	if !Alive(os.Getpid()) {
		t.Errorf("Alive(self) = false, state %q", ProcState(os.Getpid()))
	}
	if got := ProcStatus(os.Getpid(), "Pid"); got == "" {
		t.Error(`ProcStatus(self, "Pid") is empty`)
	}
	const noPid = 1 << 30 // above pid_max
	if Alive(noPid) || ProcState(noPid) != "" || ProcStatus(noPid, "State") != "" {
		t.Errorf("a missing process reads as state %q, alive %v", ProcState(noPid), Alive(noPid))
	}
}

func TestMounts(t *testing.T) {
	if !IsMountPoint(t, "/") {
		t.Error("/ is not a mount point")
	}
	all := Mounts(t, "/")
	if !slices.Contains(all, "/") || all[len(all)-1] != "/" {
		t.Errorf(`Mounts("/") = %v, want every mount, "/" last`, all)
	}
	if got := Mounts(t, t.TempDir()); len(got) != 0 {
		t.Errorf("a new temporary directory has mounts below it: %v", got)
	}
}
