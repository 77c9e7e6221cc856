package upgrade

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// crictl against the node's daemon, the pod and container configurations of the
// scenarios, and what the checks read back: pods, containers, images and metrics.

// The test image: storagetest's busybox, pushed to a loopback registry that the daemons
// reach through a mirror of imagePrefix.
const imagePrefix = "registry.k8s.io"

var (
	image      = imagePrefix + "/upgrade/busybox:1.0"
	otherImage = imagePrefix + "/upgrade/busybox-int:1.0" // another config: another image ID
)

var idRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// crictlWithin runs crictl against the node's daemon, killed after limit.
func (n *node) crictlWithin(limit time.Duration, args ...string) (stdout, stderr string, err error) {
	path, err := exec.LookPath("crictl")
	if err != nil {
		return "", "", errors.New("crictl not found in PATH (make deps)")
	}
	limit = testenv.Scaled(limit)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{
		"--config", os.DevNull,
		"--runtime-endpoint", "unix://" + n.socket,
		"--image-endpoint", "unix://" + n.socket,
		"--timeout", testenv.Scaled(30 * time.Second).String(),
	}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("killed after %v: %w", limit, err)
	}
	return out.String(), errb.String(), err
}

// crictl runs crictl and logs a failure.
func (n *node) crictl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	start := time.Now()
	stdout, stderr, err = n.crictlWithin(90*time.Second, args...)
	took := time.Since(start)
	switch {
	case err != nil:
		t.Logf("crictl %s: %v after %v: %s", strings.Join(args, " "), err, took.Round(time.Millisecond), strings.TrimSpace(stderr))
	case took > 2*time.Second:
		t.Logf("crictl %s: ok after %v", strings.Join(args, " "), took.Round(time.Millisecond))
	}
	return stdout, stderr, err
}

// must runs crictl and fails the test when it fails; it returns stdout.
func (n *node) must(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, err := n.crictl(t, args...)
	if err != nil {
		t.Fatalf("crictl %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr)
	}
	return stdout
}

// mustID runs crictl and returns the ID it printed last.
func (n *node) mustID(t *testing.T, args ...string) string {
	t.Helper()
	id := lastLine(n.must(t, args...))
	if !idRE.MatchString(id) {
		t.Fatalf("crictl %s printed %q, not an ID", strings.Join(args, " "), id)
	}
	return id
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// requireCode fails the test unless a crictl call failed with the gRPC code.
func requireCode(t *testing.T, what string, err error, stderr, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want a %s error", what, code)
	}
	if !strings.Contains(stderr, code) {
		t.Fatalf("%s: failed without code %s: %v\nstderr: %s", what, code, err, stderr)
	}
}

// pod is a pod configuration of the test, written for crictl runp.
type pod struct {
	name string
	path string
}

// podConfig writes a pod configuration on the pod network with a log directory, the
// node's cgroup parent and the pid namespace mode pid; userns gives it a user namespace
// of its own (0 -> 200000, 65536 IDs).
func (n *node) podConfig(t *testing.T, name string, pid runtimeapi.NamespaceMode, userns bool) pod {
	t.Helper()
	uid := testenv.RandomHex(t, 16)
	logDir := filepath.Join(n.podLogDir, "upgrade_"+name+"_"+uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "upgrade", "uid": uid, "attempt": 0},
		"hostname":      name,
		"log_directory": logDir,
		"labels":        map[string]string{"upgrade": "crijournal"},
		"linux": map[string]any{"cgroup_parent": n.cgroupPar, "security_context": map[string]any{
			"namespace_options": namespaces(pid, userns)}},
	}
	return pod{name: name, path: writeJSON(t, "pod-"+name, cfg)}
}

// namespaces are the namespace options of a pod or of a container in it (the kubelet
// copies the pod's into each container's).
func namespaces(pid runtimeapi.NamespaceMode, userns bool) map[string]any {
	ns := map[string]any{"pid": int(pid)}
	if userns {
		ids := []map[string]any{{"container_id": 0, "host_id": 200000, "length": 65536}}
		ns["userns_options"] = map[string]any{"mode": int(runtimeapi.NamespaceMode_POD), "uids": ids, "gids": ids}
	}
	return ns
}

// ctrConfig writes a container configuration: ref's image, command, a log file
// <name>.log in the pod's log directory and the pod's namespace options.
func ctrConfig(t *testing.T, name, ref string, pid runtimeapi.NamespaceMode, userns bool, command ...string) string {
	t.Helper()
	cfg := map[string]any{
		"metadata": map[string]any{"name": name, "attempt": 0},
		"image":    map[string]any{"image": ref},
		"command":  command,
		"log_path": name + ".log",
		"labels":   map[string]string{"upgrade": "crijournal"},
		"linux": map[string]any{"security_context": map[string]any{
			"namespace_options": namespaces(pid, userns)}},
	}
	return writeJSON(t, "ctr-"+name, cfg)
}

func writeJSON(t *testing.T, stem string, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), stem+".json")
	writeFile(t, path, string(b), 0o644)
	return path
}

// Commands of the scenarios' containers.
var (
	// ticker writes a line every 200ms: its log grows while it runs.
	ticker = []string{"sh", "-c", "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"}
	// sleeper runs until it is killed.
	sleeper = []string{"sh", "-c", "echo hello; exec sleep 3600"}
	// exits3 exits at once with code 3.
	exits3 = []string{"sh", "-c", "echo bye; exit 3"}
)

// podStates returns crictl pods as ID -> state.
func (n *node) podStates(t *testing.T) map[string]string {
	t.Helper()
	var resp struct {
		Items []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"items"`
	}
	decode(t, "crictl pods -o json", n.must(t, "pods", "-o", "json"), &resp)
	out := map[string]string{}
	for _, p := range resp.Items {
		out[p.ID] = p.State
	}
	return out
}

// ctrState is what the checks compare of a container.
type ctrState struct {
	Pod   string
	State string
	Exit  int32
}

// ctrStates returns crictl ps -a as ID -> pod, state and exit code (from inspect).
func (n *node) ctrStates(t *testing.T) map[string]ctrState {
	t.Helper()
	var resp struct {
		Containers []struct {
			ID           string `json:"id"`
			PodSandboxID string `json:"podSandboxId"`
			State        string `json:"state"`
		} `json:"containers"`
	}
	decode(t, "crictl ps -a -o json", n.must(t, "ps", "-a", "-o", "json"), &resp)
	out := map[string]ctrState{}
	for _, c := range resp.Containers {
		out[c.ID] = ctrState{Pod: c.PodSandboxID, State: c.State, Exit: n.inspectCtr(t, c.ID).ExitCode}
	}
	return out
}

// ctrStatus is the part of crictl inspect -o json the checks read.
type ctrStatus struct {
	State    string `json:"state"`
	ExitCode int32  `json:"exitCode"`
	Reason   string `json:"reason"`
	LogPath  string `json:"logPath"`
}

func (n *node) inspectCtr(t *testing.T, id string) ctrStatus {
	t.Helper()
	var resp struct {
		Status ctrStatus `json:"status"`
	}
	decode(t, "crictl inspect "+id, n.must(t, "inspect", "-o", "json", id), &resp)
	return resp.Status
}

// requireCtrState fails the test unless container id is in state.
func (n *node) requireCtrState(t *testing.T, id, state string) ctrStatus {
	t.Helper()
	st := n.inspectCtr(t, id)
	if st.State != state {
		t.Fatalf("container %s is %s (exit %d, reason %q), want %s", id, st.State, st.ExitCode, st.Reason, state)
	}
	return st
}

// waitCtrState waits until container id is in state.
func (n *node) waitCtrState(t *testing.T, id, state string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 100*time.Millisecond, func() error {
		if st := n.inspectCtr(t, id); st.State != state {
			return fmt.Errorf("container %s is %s, want %s within %v", id, st.State, state, within)
		}
		return nil
	})
}

// images returns crictl images as image ID -> sorted tags.
func (n *node) images(t *testing.T) map[string][]string {
	t.Helper()
	var resp struct {
		Images []struct {
			ID       string   `json:"id"`
			RepoTags []string `json:"repoTags"`
		} `json:"images"`
	}
	decode(t, "crictl images -o json", n.must(t, "images", "-o", "json"), &resp)
	out := map[string][]string{}
	for _, img := range resp.Images {
		tags := slices.Clone(img.RepoTags)
		slices.Sort(tags)
		out[img.ID] = tags
	}
	return out
}

// logSize returns the size of a container's log file (crictl inspect's log path).
func (n *node) logSize(t *testing.T, id string) int64 {
	t.Helper()
	st, err := os.Stat(n.inspectCtr(t, id).LogPath)
	if err != nil {
		t.Fatalf("the log of %s: %v", id, err)
	}
	return st.Size()
}

// execSync runs crictl exec --sync and returns stdout, trimmed.
func (n *node) execSync(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	return strings.TrimSpace(n.must(t, append([]string{"exec", "--sync", id}, cmd...)...))
}

var metricsRE = regexp.MustCompile(`metrics served.*address=(http://127\.0\.0\.1:[0-9]+/metrics)`)

// metrics scrapes the metrics endpoint of the daemon's latest start (its address is in
// the log) and returns the body.
func (n *node) metrics(t *testing.T) string {
	t.Helper()
	logged, _ := os.ReadFile(n.logPath)
	all := metricsRE.FindAllStringSubmatch(string(logged), -1)
	if all == nil {
		t.Fatal("no metrics address in the daemon's log")
	}
	url := all[len(all)-1][1]
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s", url, resp.Status)
	}
	return string(body)
}

func decode(t *testing.T, what, data string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(data), v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, data)
	}
}
