package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/crijournal/crijournal/internal/testenv"
)

// writePlugin writes an executable shell script plugin into a temp dir and
// returns its path.
func writePlugin(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExecPlugin(t *testing.T) {
	tests := []struct {
		name       string
		script     string
		wantOut    string
		wantCode   uint   // CNI error code, if the plugin fails
		wantErrMsg string // substring of the CNI error message
	}{
		{
			name:    "stdout, stdin and environment",
			script:  "printf '%s|%s|' \"$CNI_COMMAND\" \"$CNI_IFNAME\"; cat; echo 'noise' >&2",
			wantOut: `ADD|eth7|{"cniVersion":"1.0.0"}`,
		},
		{
			name:       "CNI error on stdout",
			script:     `printf '{"cniVersion":"1.0.0","code":7,"msg":"boom","details":"the pool is dry"}'; exit 1`,
			wantCode:   7,
			wantErrMsg: "boom; the pool is dry",
		},
		{
			name:       "stderr only",
			script:     "echo 'cannot frobnicate' >&2; exit 2",
			wantErrMsg: "cannot frobnicate",
		},
		{
			name:       "no output",
			script:     "exit 3",
			wantErrMsg: "netplugin failed with no error message: exit status 3",
		},
		{
			name:       "garbage on stdout",
			script:     "echo 'not json'; exit 1",
			wantErrMsg: "error parsing its diagnostic message",
		},
		{
			name:       "JSON that is not an error",
			script:     "echo '{}'; exit 1",
			wantErrMsg: "without a CNI error on stdout",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plugin := writePlugin(t, "fake", tc.script)
			out, err := (&pluginExec{}).ExecPlugin(context.Background(), plugin,
				[]byte(`{"cniVersion":"1.0.0"}`), []string{"CNI_COMMAND=ADD", "CNI_IFNAME=eth7"})
			if tc.wantErrMsg == "" {
				if err != nil {
					t.Fatalf("ExecPlugin: %v", err)
				}
				if string(out) != tc.wantOut {
					t.Fatalf("stdout = %q, want %q", out, tc.wantOut)
				}
				return
			}
			var cniErr *types.Error
			if !errors.As(err, &cniErr) {
				t.Fatalf("ExecPlugin error = %#v, want a *types.Error", err)
			}
			if cniErr.Code != tc.wantCode || !strings.Contains(cniErr.Error(), tc.wantErrMsg) {
				t.Fatalf("CNI error = code %d %q, want code %d containing %q", cniErr.Code, cniErr.Error(), tc.wantCode, tc.wantErrMsg)
			}
		})
	}
}

func TestExecPluginNotStarted(t *testing.T) {
	notExecutable := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(notExecutable, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{notExecutable, filepath.Join(t.TempDir(), "missing")} {
		if _, err := (&pluginExec{}).ExecPlugin(context.Background(), p, nil, nil); err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("ExecPlugin(%s) = %v, want an error naming it", p, err)
		}
	}
}

// TestExecPluginContext: when ctx ends, the plugin and the plugin it
// delegates to (its child) are killed.
func TestExecPluginContext(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	plugin := writePlugin(t, "slow", fmt.Sprintf("/bin/sleep 30 &\necho $! > %s\nwait\n", pidFile))
	t.Cleanup(func() { // whatever happens below, leave no sleeper behind
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && testenv.Alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := (&pluginExec{}).ExecPlugin(ctx, plugin, nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ExecPlugin = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ExecPlugin returned after %v; the plugin was not killed", d)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if testenv.Alive(child) {
			return fmt.Errorf("the plugin's child %d still runs after ExecPlugin was canceled", child)
		}
		return nil
	})
}

func TestFindInPath(t *testing.T) {
	plugin := writePlugin(t, "fake", "exit 0\n")
	e := &pluginExec{}
	got, err := e.FindInPath("fake", []string{t.TempDir(), filepath.Dir(plugin)})
	if err != nil || got != plugin {
		t.Fatalf("FindInPath = %q, %v; want %q", got, err, plugin)
	}
	if _, err := e.FindInPath("fake", []string{t.TempDir()}); err == nil {
		t.Fatal("FindInPath found a plugin that is not there")
	}
	info, err := e.Decode([]byte(`{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}`))
	if err != nil || strings.Join(info.SupportedVersions(), ",") != "0.4.0,1.0.0" {
		t.Fatalf("Decode = %v, %v", info, err)
	}
}

// helperEnv names the variable that turns TestHelperExecPlugin into the
// "daemon" of TestPluginDiesWithDaemon.
const helperEnv = "CRIJOURNAL_NETNS_TEST_PLUGIN"

// TestHelperExecPlugin is not a test: TestPluginDiesWithDaemon runs the test
// binary with helperEnv set, and this runs the plugin named there, which
// sleeps until the "daemon" is killed.
func TestHelperExecPlugin(t *testing.T) {
	plugin := os.Getenv(helperEnv)
	if plugin == "" {
		t.Skip("helper process for TestPluginDiesWithDaemon")
	}
	_, err := (&pluginExec{}).ExecPlugin(context.Background(), plugin, nil, nil)
	t.Fatalf("the plugin returned (%v); the parent should have killed this process first", err)
}

// TestPluginDiesWithDaemon: a plugin started through pluginExec is killed
// when the process that started it is killed (it must not finish its ADD).
func TestPluginDiesWithDaemon(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	plugin := writePlugin(t, "sleeper", fmt.Sprintf("echo $$ > %s.tmp && mv %s.tmp %s\nexec /bin/sleep 30\n", pidFile, pidFile, pidFile))

	helper := exec.Command(os.Args[0], "-test.run=^TestHelperExecPlugin$", "-test.count=1")
	helper.Env = append(os.Environ(), helperEnv+"="+plugin)
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = helper.Process.Kill()
		_ = helper.Wait()
	})

	var pid int
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatal(err)
			}
		}
		if pid == 0 {
			return errors.New("the plugin did not start")
		}
		return nil
	})
	t.Cleanup(func() {
		if testenv.Alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if !testenv.Alive(pid) {
		t.Fatalf("plugin %d is not running", pid)
	}

	if err := helper.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()

	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() error {
		if testenv.Alive(pid) {
			return fmt.Errorf("plugin %d still runs after its parent was killed", pid)
		}
		return nil
	})
}
