// Package failpoint provides named failure points for crash and error tests. A point is
// armed by the environment variable CRIJOURNAL_FAILPOINTS, read once at start-up:
//
//	CRIJOURNAL_FAILPOINTS="sandbox-create/cni-attach/after-intent=kill,journal/remove/netns-pin/before-undo=error"
//
// Actions: "kill" (the process sends itself SIGKILL: a crash at exactly that point),
// "error" (Inject returns ErrInjected, so the step fails as if its action had), and
// "sleep:<duration>". When the variable is unset, Inject is a map lookup on a nil map.
package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// EnvVar names the environment variable that arms failure points.
const EnvVar = "CRIJOURNAL_FAILPOINTS"

// ErrInjected is returned by Inject at a point armed with "error".
var ErrInjected = errors.New("injected failure")

var (
	loadOnce sync.Once
	armed    map[string]string
	loadErr  error
)

func load() {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return
	}
	armed = map[string]string{}
	for item := range strings.SplitSeq(spec, ",") {
		name, action, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" {
			loadErr = fmt.Errorf("%s: %q is not name=action", EnvVar, item)
			continue
		}
		armed[name] = action
	}
}

// Check reports a malformed CRIJOURNAL_FAILPOINTS, so the daemon can refuse to start
// rather than silently not injecting.
func Check() error {
	loadOnce.Do(load)
	return loadErr
}

// Inject acts at the named point if it is armed, and returns nil otherwise.
func Inject(name string) error {
	loadOnce.Do(load)
	if armed == nil {
		return nil
	}
	action, ok := armed[name]
	if !ok {
		return nil
	}
	switch {
	case action == "kill":
		fmt.Fprintf(os.Stderr, "failpoint %s: SIGKILL\n", name)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	case action == "error":
		return fmt.Errorf("failpoint %s: %w", name, ErrInjected)
	case strings.HasPrefix(action, "sleep:"):
		if d, err := time.ParseDuration(strings.TrimPrefix(action, "sleep:")); err == nil {
			time.Sleep(d)
		}
	}
	return nil
}
