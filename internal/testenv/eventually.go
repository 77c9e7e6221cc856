package testenv

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TimeScaleEnv names the factor by which the tests stretch their bounds on waiting, for
// a machine many times slower than the one they were written on: the emulated cgroup v2
// node of `make test-vm` (test/vm) runs them with 10. Unset, or not a number of at
// least 1, it is 1: on the host of `make test` nothing is stretched.
const TimeScaleEnv = "CRIJOURNAL_TEST_TIME_SCALE"

var timeScale = sync.OnceValue(func() float64 {
	f, err := strconv.ParseFloat(os.Getenv(TimeScaleEnv), 64)
	if err != nil || f < 1 {
		return 1
	}
	return f
})

// Scaled returns d stretched by TimeScaleEnv's factor. Poll, Eventually and Within
// scale their bounds themselves; a test that bounds a wait of its own (a context's
// deadline, a client's timeout) passes it through Scaled.
func Scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * timeScale()) }

// Poll calls cond, waiting every between calls, until it returns nil, and returns nil
// then; when that has not happened within within, it returns cond's last error. cond is called at
// least once, and once more at the end of the time, so a condition that holds just as
// the time runs out is not reported as failed.
func Poll(within, every time.Duration, cond func() error) error {
	deadline := time.Now().Add(Scaled(within))
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(min(every, max(time.Until(deadline), time.Millisecond)))
	}
}

// Eventually fails the test (Fatal) unless cond returns nil within within; it polls
// every (see Poll). The failure message is cond's last error and how long the
// test waited, so cond's error says what is still wrong, as in "process 42 still runs".
// Call it from the test's goroutine.
func Eventually(t testing.TB, within, every time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(within, every, cond); err != nil {
		t.Fatalf("%v (waited %v)", err, Scaled(within))
	}
}

// Until makes a condition of Poll and Eventually from a predicate: its error says what
// is still awaited ("still waiting for " + what).
func Until(what string, ok func() bool) func() error {
	return func() error {
		if ok() {
			return nil
		}
		return errors.New("still waiting for " + what)
	}
}

// Within runs f and returns its error, or an error saying f had not returned within
// within: for a call that must not wait for something (a removal that answers before
// its deferred undo, say). f then goes on running on a goroutine of its own, whose
// result nobody reads; the caller fails its test, and may release what f waits for.
func Within(within time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(Scaled(within)):
		return fmt.Errorf("%w: not returned within %v", ErrTimedOut, Scaled(within))
	}
}

// ErrTimedOut is Within's error for a call that had not returned in time.
var ErrTimedOut = errors.New("timed out")
