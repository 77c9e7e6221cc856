package failpoint

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
)

func reset(t *testing.T, spec string) {
	t.Setenv(EnvVar, spec)
	loadOnce, armed, loadErr = sync.Once{}, nil, nil
	t.Cleanup(func() { loadOnce, armed, loadErr = sync.Once{}, nil, nil })
}

func TestInject(t *testing.T) {
	tests := []struct {
		spec, point string
		wantErr     error
		wantCheck   bool
	}{
		{spec: "", point: "a/b", wantErr: nil},
		{spec: "a/b=error", point: "a/b", wantErr: ErrInjected},
		{spec: "a/b=error", point: "a/c", wantErr: nil},
		{spec: "x=sleep:1ms, a/b=error", point: "a/b", wantErr: ErrInjected},
		{spec: "x=sleep:1ms", point: "x", wantErr: nil},
		{spec: "garbage", point: "garbage", wantCheck: true},
	}
	for _, tt := range tests {
		t.Run(tt.spec+"@"+tt.point, func(t *testing.T) {
			reset(t, tt.spec)
			if err := Inject(tt.point); !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Inject = %v, want %v", err, tt.wantErr)
			}
			if got := Check() != nil; got != tt.wantCheck {
				t.Fatalf("Check error = %v, want error %v", Check(), tt.wantCheck)
			}
		})
	}
}

// TestKill runs itself as a child with a kill point armed and checks it died of SIGKILL.
func TestKill(t *testing.T) {
	if os.Getenv("FAILPOINT_CHILD") == "1" {
		Inject("die/here")
		os.Exit(0)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill$")
	cmd.Env = append(os.Environ(), "FAILPOINT_CHILD=1", EnvVar+"=die/here=kill")
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("child: %v, want killed", err)
	}
	ws := exit.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", ws)
	}
}
