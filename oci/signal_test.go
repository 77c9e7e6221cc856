package oci

import (
	"syscall"
	"testing"
)

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{"SIGTERM": 15, "TERM": 15, "sigkill": 9, "9": 9, "SIGRTMIN+1": 35, "": 15} {
		got, err := ParseSignal(in)
		if err != nil || int(got) != want {
			t.Errorf("ParseSignal(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"SIGNOPE", "0", "99", "-1"} {
		if _, err := ParseSignal(in); err == nil {
			t.Errorf("ParseSignal(%q) succeeded", in)
		}
	}
}

// TestSignalName: the names SignalName writes, the real-time ones as kill -l does, and
// that ParseSignal reads each back as its number.
func TestSignalName(t *testing.T) {
	for sig, want := range map[syscall.Signal]string{
		syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL", 34: "SIGRTMIN", 35: "SIGRTMIN+1", 49: "SIGRTMIN+15",
		50: "SIGRTMAX-14", 63: "SIGRTMAX-1", 64: "SIGRTMAX", 0: "", 65: "",
	} {
		if got := SignalName(sig); got != want {
			t.Errorf("SignalName(%d) = %q, want %q", sig, got, want)
		}
	}
	for n := 1; n <= 64; n++ {
		name := SignalName(syscall.Signal(n))
		if name == "" {
			continue // 32 and 33: glibc's own
		}
		if got, err := ParseSignal(name); err != nil || int(got) != n {
			t.Errorf("ParseSignal(SignalName(%d) = %q) = %d, %v", n, name, got, err)
		}
	}
}
