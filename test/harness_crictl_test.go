package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Helpers that drive a daemon through crictl and its gRPC API: calls, pod
// configurations, pod status, and the check of a failure's gRPC code.

// crictl runs crictl against the daemon and returns its stdout and stderr
// (crictl prints warnings on stderr: take results from stdout only).
func (d *daemon) crictl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	start := time.Now()
	stdout, stderr, err = d.crictlTimeout(90*time.Second, args...)
	if err != nil {
		t.Logf("crictl %s: %v after %v: %s", strings.Join(args, " "), err, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
	} else {
		t.Logf("crictl %s: ok after %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	}
	return stdout, stderr, err
}

// crictlTimeout runs crictl, killing it after limit (scaled, see testenv.Scaled).
func (d *daemon) crictlTimeout(limit time.Duration, args ...string) (stdout, stderr string, err error) {
	limit = testenv.Scaled(limit)
	if crictlPath == "" {
		return "", "", errors.New("crictl not found")
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, crictlPath, d.crictlArgs(args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("crictl %s killed after %v: %w", strings.Join(args, " "), limit, err)
	}
	return out.String(), errb.String(), err
}

// crictlArgs are crictl's arguments for a command against the daemon: its endpoints,
// no configuration file, then args.
func (d *daemon) crictlArgs(args ...string) []string {
	return append([]string{
		"--config", os.DevNull,
		"--runtime-endpoint", "unix://" + d.socket,
		"--image-endpoint", "unix://" + d.socket,
		"--timeout", testenv.Scaled(30 * time.Second).String(),
	}, args...)
}

// mustCrictl runs crictl and fails the test when it fails; it returns stdout.
func (d *daemon) mustCrictl(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, err := d.crictl(t, args...)
	if err != nil {
		t.Fatalf("crictl %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr)
	}
	return stdout
}

// runp runs crictl runp with args (flags, then the pod config file) and
// returns the sandbox ID it printed; err is crictl's error, with its stderr.
func (d *daemon) runp(t *testing.T, args ...string) (id, stderr string, err error) {
	t.Helper()
	stdout, stderr, err := d.crictl(t, append([]string{"runp"}, args...)...)
	if err != nil {
		return "", stderr, err
	}
	id = lastLine(stdout)
	if !idRE.MatchString(id) {
		t.Fatalf("crictl runp %s printed %q, not a sandbox ID", strings.Join(args, " "), stdout)
	}
	return id, stderr, nil
}

// mustRunp runs crictl runp and fails the test unless it returns an ID.
func (d *daemon) mustRunp(t *testing.T, args ...string) string {
	t.Helper()
	id, stderr, err := d.runp(t, args...)
	if err != nil {
		t.Fatalf("crictl runp %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr)
	}
	return id
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// pods returns the IDs crictl pods -q lists.
func (d *daemon) pods(t *testing.T) []string {
	t.Helper()
	ids := strings.Fields(d.mustCrictl(t, "pods", "-q"))
	slices.Sort(ids)
	return ids
}

// requirePods fails the test unless crictl pods -q lists exactly want.
func (d *daemon) requirePods(t *testing.T, why string, want ...string) {
	t.Helper()
	requireListed(t, why, "crictl pods -q", d.pods(t), want)
}

// requireListed fails the test unless the sorted IDs got, as listed by the
// command named, are exactly want (in any order).
func requireListed(t *testing.T, why, command string, got, want []string) {
	t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %s lists %q, want %q", why, command, got, want)
	}
}

// podStatus is the part of crictl inspectp -o json the tests read.
type podStatus struct {
	Status struct {
		ID       string `json:"id"`
		State    string `json:"state"`
		Metadata struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
			UID       string `json:"uid"`
			Attempt   int    `json:"attempt"`
		} `json:"metadata"`
		Network *struct {
			IP string `json:"ip"`
		} `json:"network"`
	} `json:"status"`
}

// inspectp returns the sandbox's status from crictl inspectp -o json.
func (d *daemon) inspectp(t *testing.T, id string) podStatus {
	t.Helper()
	var st podStatus
	d.crictlStatus(t, "inspectp", id, &st, func() string { return st.Status.ID })
	return st
}

// crictlStatus runs `crictl <verb> -o json id`, decodes it into st, and requires that the
// status it describes (statusID, read after decoding) is id's.
func (d *daemon) crictlStatus(t *testing.T, verb, id string, st any, statusID func() string) {
	t.Helper()
	out := d.mustCrictl(t, verb, "-o", "json", id)
	if err := json.Unmarshal([]byte(out), st); err != nil {
		t.Fatalf("crictl %s -o json %s: %v\n%s", verb, id, err, out)
	}
	if got := statusID(); got != id {
		t.Fatalf("crictl %s %s: status.id is %q\n%s", verb, id, got, out)
	}
}

// requireState fails the test unless crictl inspectp reports the state.
func (d *daemon) requireState(t *testing.T, id, want string) podStatus {
	t.Helper()
	st := d.inspectp(t, id)
	if st.Status.State != want {
		t.Fatalf("crictl inspectp %s: state %q, want %q", id, st.Status.State, want)
	}
	return st
}

// removePod stops and removes a sandbox, failing the test if either fails.
func (d *daemon) removePod(t *testing.T, id string) {
	t.Helper()
	d.mustCrictl(t, "stopp", id)
	d.mustCrictl(t, "rmp", id)
}

// requireCode fails the test unless a crictl call failed with the gRPC code
// (crictl prints "code = <Code>" in its error).
func requireCode(t *testing.T, what string, err error, stderr, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want a %s error", what, code)
	}
	if !strings.Contains(stderr, code) {
		t.Fatalf("%s: failed without code %s: %v\nstderr: %s", what, code, err, stderr)
	}
}

// cri returns a CRI runtime client on the daemon's socket, closed when the
// test ends, for calls crictl cannot make as such (crictl rmp asks for the
// sandbox's status first and gives up on an unknown ID).
func (d *daemon) cri(t *testing.T) runtimeapi.RuntimeServiceClient {
	t.Helper()
	conn := d.criConn(t)
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
}

// criConn is a gRPC connection to the daemon's socket, the caller's to close.
func (d *daemon) criConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("gRPC client on %s: %v", d.socket, err)
	}
	return conn
}

// requireRemoveRPC calls RemovePodSandbox directly and fails the test unless
// it succeeds.
func (d *daemon) requireRemoveRPC(t *testing.T, id, why string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.cri(t).RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		t.Fatalf("RemovePodSandbox of %s (%s): %v, want success", id, why, err)
	}
}

// podConfig writes a pod sandbox configuration for crictl runp and returns
// its path. A host-network pod shares the node's network namespace.
func podConfig(t *testing.T, name, ns, uid string, attempt int, hostNetwork bool) string {
	t.Helper()
	cfg := map[string]any{
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": uid, "attempt": attempt},
		"hostname": "e2e",
		"labels":   map[string]string{"e2e": "crijournal"},
	}
	if hostNetwork {
		cfg["linux"] = map[string]any{
			"security_context": map[string]any{"namespace_options": map[string]any{"network": 2}},
		}
	}
	return writePodJSON(t, fmt.Sprintf("pod-%s-%d", sanitize(name), attempt), cfg)
}

// writePodJSON writes any pod configuration and returns its path.
func writePodJSON(t *testing.T, stem string, cfg map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), stem+".json")
	writeFile(t, path, string(b), 0o644)
	return path
}

var unsafeRE = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

func sanitize(s string) string { return unsafeRE.ReplaceAllString(s, "_") }

// info returns crictl info -o json as its top-level keys.
func (d *daemon) info(t *testing.T) map[string]json.RawMessage {
	t.Helper()
	out := d.mustCrictl(t, "info", "-o", "json")
	var info map[string]json.RawMessage
	mustDecode(t, "crictl info", []byte(out), &info)
	return info
}

func mustDecode(t *testing.T, what string, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, data)
	}
}

// crictlResult is the outcome of one crictl call made in the background.
type crictlResult struct {
	stdout, stderr string
	err            error
	elapsed        time.Duration
}

// runpBackground starts crictl runp with args in a goroutine.
func (d *daemon) runpBackground(t *testing.T, args ...string) <-chan crictlResult {
	t.Helper()
	ch := make(chan crictlResult, 1)
	go func() {
		start := time.Now()
		stdout, stderr, err := d.crictl(t, append([]string{"runp"}, args...)...)
		ch <- crictlResult{stdout, stderr, err, time.Since(start)}
	}()
	return ch
}
