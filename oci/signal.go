package oci

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The real-time signals as Linux numbers them for a process (glibc keeps 32 and 33 for
// itself): the one table of signal names, with unix's names of the others, that
// ParseSignal reads and SignalName writes.
const sigRTMin, sigRTMax = 34, 64

// ParseSignal parses a stop signal as images write it: "SIGTERM", "TERM", "sigterm",
// "15", "SIGRTMIN+3" or "RTMAX-1". Empty means SIGTERM.
func ParseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if name == "" {
		return syscall.SIGTERM, nil
	}
	valid := func(n int) (syscall.Signal, error) {
		if n < 1 || n > sigRTMax {
			return 0, invalid("signal %q is out of range", s)
		}
		return syscall.Signal(n), nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		return valid(n)
	}
	name = strings.TrimPrefix(name, "SIG")
	for _, rt := range []struct {
		prefix string
		base   int
	}{{"RTMIN", sigRTMin}, {"RTMAX", sigRTMax}} {
		rest, ok := strings.CutPrefix(name, rt.prefix)
		if !ok {
			continue
		}
		if rest == "" {
			return valid(rt.base)
		}
		n, err := strconv.Atoi(rest) // "+3" or "-1"
		if err != nil {
			return 0, invalid("unknown signal %q", s)
		}
		return valid(rt.base + n)
	}
	if sig := unix.SignalNum("SIG" + name); sig != 0 {
		return sig, nil
	}
	return 0, invalid("unknown signal %q", s)
}

// SignalName is the name of sig that ParseSignal reads, as kill -l and the CRI write it:
// "SIGTERM", "SIGRTMIN", "SIGRTMIN+1" to "SIGRTMIN+15", "SIGRTMAX-14" to "SIGRTMAX-1",
// "SIGRTMAX"; "" for a number that is no signal.
func SignalName(sig syscall.Signal) string {
	switch n := int(sig); {
	case n == sigRTMin:
		return "SIGRTMIN"
	case n > sigRTMin && n <= sigRTMin+15:
		return fmt.Sprintf("SIGRTMIN+%d", n-sigRTMin)
	case n > sigRTMin+15 && n < sigRTMax:
		return fmt.Sprintf("SIGRTMAX-%d", sigRTMax-n)
	case n == sigRTMax:
		return "SIGRTMAX"
	}
	return unix.SignalName(sig)
}
