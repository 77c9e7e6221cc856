package pause

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestProtocolGolden pins the pause protocol (testdata/golden/protocol.txt): how the
// daemon starts a pause process and hears from it (its arguments, environment, file
// descriptors and messages), and how a restarted daemon, or a later release after an
// upgrade, recognizes one an earlier daemon started: by its command line, "<program>
// pause <sandbox ID>", kept by the sleeper it becomes. Changing it (-update) strands the
// pause processes of pods that outlive the upgrade: that needs the new daemon to know
// both forms, and a CHANGELOG entry.
func TestProtocolGolden(t *testing.T) {
	var b strings.Builder
	for _, kv := range []struct{ name, value string }{
		{"argv", "<program> " + Arg + " <sandbox ID> (kept by the sleeper: it is executed with the same argv)"},
		{"EnvUser", EnvUser + "=<uid>:<gid> (default " + fmt.Sprint(DefaultUser) + ")"},
		{"EnvStarterMountNS", EnvStarterMountNS},
		{"EnvSleeperFD", EnvSleeperFD + "=<fd above ReadyFD>"},
		{"EnvPlacedFD", EnvPlacedFD + "=<fd above ReadyFD>"},
		{"ReadyFD", fmt.Sprint(ReadyFD)},
		{"Ready", fmt.Sprintf("%q (anything else: the error, one line)", Ready)},
		{"Placed", fmt.Sprintf("%q", Placed)},
		{"SleeperName", SleeperName + " (beside the pause program)"},
	} {
		fmt.Fprintf(&b, "%-18s %s\n", kv.name, kv.value)
	}
	testenv.Golden(t, "testdata/golden/protocol.txt", []byte(b.String()))
}

// TestSleeperSpeaksTheProtocol: the sleeper (cmd/crijournal-pause-sleep, in C) reports on
// the file descriptor and with the message the daemon reads (ReadyFD, Ready).
func TestSleeperSpeaksTheProtocol(t *testing.T) {
	src, err := os.ReadFile("../../cmd/crijournal-pause-sleep/sleep.c")
	if err != nil {
		t.Fatal(err)
	}
	fd := regexp.MustCompile(`(?m)^#define READY_FD (\d+)$`).FindSubmatch(src)
	msg := regexp.MustCompile(`(?m)^static const char ready\[\] = "(.*)";$`).FindSubmatch(src)
	if fd == nil || string(fd[1]) != fmt.Sprint(ReadyFD) {
		t.Errorf("sleep.c's READY_FD is not %d: %q", ReadyFD, fd)
	}
	if msg == nil || strings.ReplaceAll(string(msg[1]), `\n`, "\n") != Ready {
		t.Errorf("sleep.c's ready message is not %q: %q", Ready, msg)
	}
}
