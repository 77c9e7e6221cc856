package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestRelayOOMScore: a terminal's relay gets the container's oom_score_adj (0 when the
// spec does not say), never below the daemon's own, within the kernel's range.
func TestRelayOOMScore(t *testing.T) {
	adj := func(n int) *int { return &n }
	for _, tt := range []struct {
		name      string
		container *int
		own       int
		want      int
	}{
		{"BestEffort pod, daemon at 0", adj(1000), 0, 1000},
		{"Burstable pod, daemon under contrib/systemd", adj(500), -999, 500},
		{"Guaranteed pod, daemon under contrib/systemd", adj(-997), -999, -997},
		{"Guaranteed pod, daemon at 0 (the container was raised to it)", adj(-997), 0, 0},
		{"no value in the spec, daemon under contrib/systemd", nil, -999, 0},
		{"no value in the spec, daemon raised", nil, 300, 300},
		{"below the kernel's range", adj(-2000), -1000, -1000},
		{"above the kernel's range", adj(2000), 0, 1000},
	} {
		if got := relayOOMScore(tt.container, tt.own); got != tt.want {
			t.Errorf("%s: relayOOMScore = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestExecRelayOOMScoreAdj: the runc that relays an exec session's terminal, a child of
// this process for the whole session, has the container's oom_score_adj, not this
// process's (the daemon's), which it would inherit otherwise; so does the command in the
// container. The container asks for a value above this process's own (without
// CAP_SYS_RESOURCE neither can go lower), so the relay differs from its parent only
// because Exec set it.
func TestExecRelayOOMScoreAdj(t *testing.T) {
	r := newRuntime(t)
	own, err := readOOMScoreAdj("/proc/self/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	if own >= 1000 {
		t.Fatalf("this process's oom_score_adj is %d: no container can ask for more", own)
	}
	want := (own+1000)/2 + 1 // above this process's, below the most
	c := startContainer(t, r, []string{"sleep", "60"}, func(in *SpecInput) {
		in.Container.Linux = &runtimeapi.LinuxContainerConfig{Resources: &runtimeapi.LinuxContainerResources{OomScoreAdj: int64(want)}}
	})
	n, _ := strconv.ParseUint(randomHex(t, 2), 16, 32)
	marker := strconv.FormatUint(300000+n, 10)
	ctx, cancel := context.WithCancel(ctxb)
	defer cancel()
	done := make(chan error, 1)
	stdinR, stdinW := io.Pipe() // a client that keeps its session open
	defer stdinW.Close()
	go func() {
		_, err := r.Exec(ctx, c.id, []string{"sleep", marker}, Streams{Stdin: stdinR, Stdout: io.Discard, TTY: true})
		done <- err
	}()
	var relay, command string
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		relay, command = ttyRelay(c.id, marker), ""
		if s := sleepers(marker); len(s) == 1 {
			command = s[0]
		}
		if relay == "" || command == "" {
			return errors.New("the session's relay and command are not both running yet")
		}
		return nil
	})
	for what, pid := range map[string]string{"the relay (runc exec --tty)": relay, "the command in the container": command} {
		got, err := readOOMScoreAdj("/proc/" + pid + "/oom_score_adj")
		if err != nil || got != want {
			t.Errorf("%s, pid %s: oom_score_adj %d (%v), want the container's %d (this process has %d)", what, pid, got, err, want, own)
		}
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Exec after cancel: %v", err)
	}
	requireNoZombies(t)
}

// ttyRelay returns the PID of this process's child `runc ... exec --tty ... <id> sleep
// <marker>`, or "".
func ttyRelay(id, marker string) string {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || testenv.ProcStatus(pid, "PPid") != strconv.Itoa(os.Getpid()) {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(b), "\x00exec\x00--tty\x00") && strings.HasSuffix(string(b), fmt.Sprintf("\x00%s\x00sleep\x00%s\x00", id, marker)) {
			return e.Name()
		}
	}
	return ""
}
