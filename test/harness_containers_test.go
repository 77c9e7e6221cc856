package test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// Helpers of the container tests: configurations, crictl calls on containers,
// and checks of a container's state, timeouts and traces.

// memoryCgroup returns the memory cgroup of a running container's init process
// (from /proc/<pid>/cgroup); on a cgroup v2 node, its one cgroup.
func (d *daemon) memoryCgroup(t *testing.T, id string) string {
	t.Helper()
	pid := d.initPID(t, id)
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(f) == 3 && (slices.Contains(strings.Split(f[1], ","), "memory") || f[0] == "0" && f[1] == "" && cgroupV2Node()) {
			return f[2]
		}
	}
	t.Fatalf("no memory cgroup in /proc/%d/cgroup:\n%s", pid, b)
	return ""
}

// requireNoContainerTrace fails the test if the daemon holds anything of a
// container: a listed one, a journal record, a storage or runtime container.
func (d *daemon) requireNoContainerTrace(t *testing.T, why string, keep ...string) {
	t.Helper()
	if ids := d.ps(t, true); len(ids) != 0 {
		t.Errorf("%s: crictl ps -a lists %v", why, ids)
	}
	for _, r := range d.containerRecords(t) {
		t.Errorf("%s: the journal holds %s", why, describeSteps(r))
	}
	kept := func(s string) bool {
		for _, k := range keep {
			if strings.Contains(s, k) {
				return true
			}
		}
		return false
	}
	for _, l := range d.containerLeaks(t, kept) {
		t.Errorf("%s: left %s", why, l)
	}
}

// The container timeout tests slow conmon down (conmonWrapper) so that a
// CreateContainer made with `crictl create -T 2s` times out while the
// runtime creates the container. crictl gives CreateContainer the -T value
// itself (RunPodSandbox gets twice it); each test logs the deadline the
// daemon saw.
const slowConmonDelay = 4 * time.Second

// timeOutCreate makes a CreateContainer time out during a slow conmon start
// (crictl create -T 2s) and returns the ID of the container the daemon goes
// on creating, from its live journal. crictl ps -a stays empty meanwhile,
// and the container refuses inspect.
func (d *daemon) timeOutCreate(t *testing.T, podID, ctr, pod string) string {
	t.Helper()
	calls := d.conmonCalls(t)
	d.slowConmon(t, slowConmonDelay)
	start := time.Now()
	_, stderr, err := d.create(t, []string{"-T", "2s"}, podID, ctr, pod)
	elapsed := time.Since(start)
	requireCode(t, "crictl create -T 2s with a slow conmon", err, stderr, "DeadlineExceeded")
	d.waitConmonCall(t, calls+1, 5*time.Second)
	d.slowConmon(t, 0)
	if elapsed > slowConmonDelay-time.Second {
		t.Fatalf("crictl create -T 2s took %v, too close to conmon's delay %v for this test", elapsed, slowConmonDelay)
	}
	rec := d.waitContainerRecord(t, "of the timed-out creation", 5*time.Second, func(r journal.Record) bool { return true })
	if rec.State != journal.StateCreating {
		t.Fatalf("the timed-out creation %s is %s, want still %s (conmon is slow)", rec.ID, rec.State, journal.StateCreating)
	}
	t.Logf("crictl create -T 2s failed with DeadlineExceeded after %v; the daemon saw a deadline %v after the record began",
		elapsed.Round(time.Millisecond), rec.Deadline.Sub(rec.Created).Round(time.Millisecond))
	d.requirePs(t, "while the timed-out creation is still running")
	_, stderr, err = d.crictl(t, "inspect", rec.ID)
	requireCode(t, "inspect of a container being created", err, stderr, "NotFound")
	return rec.ID
}

// waitCached waits until the timed-out creation id is cached.
func (d *daemon) waitCached(t *testing.T, id string) journal.Record {
	t.Helper()
	return d.waitContainerRecord(t, id+" cached", slowConmonDelay+5*time.Second, func(r journal.Record) bool {
		return r.ID == id && r.State == journal.StateCached
	})
}

// requireNotYetCreated checks that a cached container refuses operations.
func (d *daemon) requireNotYetCreated(t *testing.T, id string) {
	t.Helper()
	for _, args := range [][]string{
		{"start", id},
		{"exec", "--sync", id, "echo", "hi"},
		{"inspect", id},
		{"stop", id},
	} {
		_, stderr, err := d.crictl(t, args...)
		requireCode(t, "crictl "+args[0]+" of a cached container", err, stderr, "NotFound")
		if !strings.Contains(stderr, "not yet created") {
			t.Errorf("crictl %s of a cached container: the error does not say it is not yet created: %s", args[0], strings.TrimSpace(stderr))
		}
	}
	d.requirePs(t, "with a cached container")
}

// requireWholeContainer checks that a created container can be started (if
// it is not) and runs: its log, exec.
func (d *daemon) requireWholeContainer(t *testing.T, id string) {
	t.Helper()
	if st := d.inspect(t, id); st.Status.State == "CONTAINER_CREATED" {
		d.mustCrictl(t, "start", id)
	}
	d.requireCtrState(t, id, "CONTAINER_RUNNING")
	if got := d.execSync(t, id, "echo", "whole"); got != "whole" {
		t.Fatalf("crictl exec --sync %s echo whole printed %q", id, got)
	}
	d.waitLog(t, id, "hello-from-container", 10*time.Second)
}

func (d *daemon) runcRoot() string    { return d.node.RuntimeRoot("runc") }
func (d *daemon) storageRoot() string { return d.node.StorageRootDir() }

// storageRunRoot is containers/storage's run root: with the transient store, the
// records of containers and of their layers are there.
func (d *daemon) storageRunRoot() string { return d.node.StorageRunRootDir() }

// usernsRootfsDir is where the daemon bind-mounts the root filesystems of containers in
// a user namespace, one directory per container (storage.Options.RootfsDir's default).
func (d *daemon) usernsRootfsDir() string { return d.node.UsernsRootfsDir() }

// containerPod writes a pod configuration for the container tests: a pod
// network (or the host's), no shared pid namespace, a log directory (made,
// as the kubelet makes it) and the node's own cgroup parent, so that the
// leak check can find every cgroup the pod's containers got.
func (d *daemon) containerPod(t *testing.T, name string, hostNetwork bool) string {
	t.Helper()
	return d.editedPod(t, name, func(cfg map[string]any) {
		if hostNetwork {
			namespaceOptions(cfg)["network"] = int(runtimeapi.NamespaceMode_NODE)
		}
	})
}

// editedPod writes a pod configuration like containerPod's on the pod network,
// changed by edit.
func (d *daemon) editedPod(t *testing.T, name string, edit func(cfg map[string]any)) string {
	t.Helper()
	uid := randomHex(t, 16)
	logDir := filepath.Join(d.podLogDir, "e2e_"+name+"_"+uid)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// pid CONTAINER, as the kubelet asks for pods that do not share their
	// process namespace: each container's command is PID 1 of its own.
	cfg := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "e2e", "uid": uid, "attempt": 0},
		"hostname":      "e2e",
		"log_directory": logDir,
		"labels":        map[string]string{"e2e": "crijournal"},
		"linux": map[string]any{"cgroup_parent": d.podCgroupParent(uid), "security_context": map[string]any{
			"namespace_options": map[string]any{"pid": int(runtimeapi.NamespaceMode_CONTAINER)}}},
	}
	edit(cfg)
	return writePodJSON(t, "pod-"+sanitize(name)+"-"+uid[:8], cfg)
}

// namespaceOptions returns the namespace options of an editedPod configuration, to edit.
func namespaceOptions(cfg map[string]any) map[string]any {
	return cfg["linux"].(map[string]any)["security_context"].(map[string]any)["namespace_options"].(map[string]any)
}

// ctrOption changes a container configuration.
type ctrOption func(cfg map[string]any)

// linuxSection returns the container configuration's linux section, made if missing.
func linuxSection(cfg map[string]any) map[string]any {
	linux, _ := cfg["linux"].(map[string]any)
	if linux == nil {
		linux = map[string]any{}
		cfg["linux"] = linux
	}
	return linux
}

// withResources sets the container's linux.resources.
func withResources(res map[string]any) ctrOption {
	return func(cfg map[string]any) { linuxSection(cfg)["resources"] = res }
}

func withMemoryLimit(bytes int64) ctrOption {
	return withResources(map[string]any{"memory_limit_in_bytes": bytes})
}

func withLogPath(p string) ctrOption { return func(cfg map[string]any) { cfg["log_path"] = p } }

// asKubeletAttempt makes a container configuration look as the kubelet's call for that
// attempt does: the restart count and termination-message annotations, and a
// termination-message file of its own in dir, with a random name, mounted at the
// annotation's path (the kubelet makes a new one for every call).
func asKubeletAttempt(t *testing.T, dir string, attempt int) ctrOption {
	t.Helper()
	file := filepath.Join(dir, randomHex(t, 4))
	writeFile(t, file, "", 0o666)
	return func(cfg map[string]any) {
		cfg["annotations"] = map[string]string{
			"io.kubernetes.container.restartCount":           fmt.Sprint(attempt),
			"io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
		}
		mounts, _ := cfg["mounts"].([]any)
		cfg["mounts"] = append(mounts, map[string]any{"container_path": "/dev/termination-log", "host_path": file})
	}
}

func withImage(ref string) ctrOption {
	return func(cfg map[string]any) { cfg["image"] = map[string]any{"image": ref} }
}

func withMount(containerPath, hostPath string) ctrOption {
	return func(cfg map[string]any) {
		mounts, _ := cfg["mounts"].([]any)
		cfg["mounts"] = append(mounts, map[string]any{"container_path": containerPath, "host_path": hostPath, "readonly": true})
	}
}

// containerConfig writes a container configuration for crictl create: the
// test image, command, and a log file <name>_<attempt>.log in the pod's log
// directory.
func containerConfig(t *testing.T, name string, attempt int, command []string, opts ...ctrOption) string {
	t.Helper()
	cfg := map[string]any{
		"metadata": map[string]any{"name": name, "attempt": attempt},
		"image":    map[string]any{"image": testImage},
		"command":  command,
		"log_path": fmt.Sprintf("%s_%d.log", name, attempt),
		"labels":   map[string]string{"e2e": "crijournal"},
		"linux": map[string]any{"security_context": map[string]any{
			"namespace_options": map[string]any{"pid": int(runtimeapi.NamespaceMode_CONTAINER)},
		}},
	}
	for _, o := range opts {
		o(cfg)
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("ctr-%s-%d.json", sanitize(name), attempt))
	writeFile(t, path, string(b), 0o644)
	return path
}

// sleeper is a command that runs until it is killed (sh as PID 1 of its pid
// namespace ignores SIGTERM: stopping it takes the SIGKILL after the timeout).
var sleeper = []string{"sh", "-c", "echo hello-from-container; sleep 3600"}

// create runs crictl create [flags] podID ctr pod and returns the container
// ID it printed; err is crictl's error, with its stderr.
func (d *daemon) create(t *testing.T, flags []string, podID, ctr, pod string) (id, stderr string, err error) {
	t.Helper()
	args := append(append([]string{"create"}, flags...), podID, ctr, pod)
	stdout, stderr, err := d.crictl(t, args...)
	if err != nil {
		return "", stderr, err
	}
	id = lastLine(stdout)
	if !idRE.MatchString(id) {
		t.Fatalf("crictl %s printed %q, not a container ID", strings.Join(args, " "), stdout)
	}
	return id, stderr, nil
}

// mustCreate runs crictl create and fails the test unless it returns an ID.
func (d *daemon) mustCreate(t *testing.T, podID, ctr, pod string) string {
	t.Helper()
	id, stderr, err := d.create(t, nil, podID, ctr, pod)
	if err != nil {
		t.Fatalf("crictl create %s %s: %v\nstderr: %s", podID, ctr, err, stderr)
	}
	return id
}

// run creates and starts a container, and returns its ID.
func (d *daemon) run(t *testing.T, podID, ctr, pod string) string {
	t.Helper()
	id := d.mustCreate(t, podID, ctr, pod)
	d.mustCrictl(t, "start", id)
	return id
}

// ps returns the IDs crictl ps -q lists (with -a, every state).
func (d *daemon) ps(t *testing.T, all bool) []string {
	t.Helper()
	args := []string{"ps", "-q"}
	if all {
		args = append(args, "-a")
	}
	ids := strings.Fields(d.mustCrictl(t, args...))
	slices.Sort(ids)
	return ids
}

// requirePs fails the test unless crictl ps -a -q lists exactly want.
func (d *daemon) requirePs(t *testing.T, why string, want ...string) {
	t.Helper()
	requireListed(t, why, "crictl ps -a -q", d.ps(t, true), want)
}

// ctrStatus is the part of crictl inspect -o json the tests read.
type ctrStatus struct {
	Status struct {
		ID         string `json:"id"`
		State      string `json:"state"`
		ExitCode   int    `json:"exitCode"`
		Reason     string `json:"reason"`
		StartedAt  string `json:"startedAt"`
		FinishedAt string `json:"finishedAt"`
		LogPath    string `json:"logPath"`
		ImageRef   string `json:"imageRef"`
		Metadata   struct {
			Name    string `json:"name"`
			Attempt int    `json:"attempt"`
		} `json:"metadata"`
		Annotations map[string]string `json:"annotations"`
		Mounts      []struct {
			ContainerPath string `json:"containerPath"`
			HostPath      string `json:"hostPath"`
		} `json:"mounts"`
	} `json:"status"`
}

// inspect returns the container's status from crictl inspect -o json.
func (d *daemon) inspect(t *testing.T, id string) ctrStatus {
	t.Helper()
	var st ctrStatus
	d.crictlStatus(t, "inspect", id, &st, func() string { return st.Status.ID })
	return st
}

// requireCtrState fails the test unless crictl inspect reports the state.
func (d *daemon) requireCtrState(t *testing.T, id, want string) ctrStatus {
	t.Helper()
	st := d.inspect(t, id)
	if st.Status.State != want {
		t.Fatalf("crictl inspect %s: state %q, want %q", id, st.Status.State, want)
	}
	return st
}

// requireExited fails the test unless the container exited with code.
func (d *daemon) requireExited(t *testing.T, id string, code int) ctrStatus {
	t.Helper()
	st := d.requireCtrState(t, id, "CONTAINER_EXITED")
	if st.Status.ExitCode != code {
		t.Fatalf("crictl inspect %s: exited with %d (reason %q), want %d", id, st.Status.ExitCode, st.Status.Reason, code)
	}
	return st
}

// execSync runs crictl exec --sync and returns stdout, trimmed.
func (d *daemon) execSync(t *testing.T, id string, cmd ...string) string {
	t.Helper()
	return strings.TrimSpace(d.mustCrictl(t, append([]string{"exec", "--sync", id}, cmd...)...))
}

// waitLog waits until crictl logs of the container holds want.
func (d *daemon) waitLog(t *testing.T, id, want string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 50*time.Millisecond, func() error {
		stdout, stderr, err := d.crictlTimeout(10*time.Second, "logs", id)
		if err == nil && strings.Contains(stdout+stderr, want) {
			return nil
		}
		return fmt.Errorf("crictl logs %s did not show %q within %v: %v\nstdout: %s\nstderr: %s", id, want, within, err, stdout, stderr)
	})
}

// removeCtr stops (at once) and removes a container, and waits until the daemon has
// finished the removal: crictl rm answers before the root filesystem is deleted
// (waitRemovals).
func (d *daemon) removeCtr(t *testing.T, id string) {
	t.Helper()
	d.mustCrictl(t, "stop", "-t", "0", id)
	d.mustCrictl(t, "rm", id)
	d.waitRemovals(t)
}

// loadPodConfig reads a pod configuration file as crictl does, for gRPC calls.
func loadPodConfig(t *testing.T, path string) *runtimeapi.PodSandboxConfig {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.PodSandboxConfig{}
	if err := protojson.Unmarshal(b, cfg); err != nil {
		t.Fatalf("pod config %s: %v", path, err)
	}
	return cfg
}

// loadContainerConfig reads a container configuration file, for gRPC calls.
func loadContainerConfig(t *testing.T, path string) *runtimeapi.ContainerConfig {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &runtimeapi.ContainerConfig{}
	if err := protojson.Unmarshal(b, cfg); err != nil {
		t.Fatalf("container config %s: %v", path, err)
	}
	return cfg
}

// withSecurity merges fields into the container's linux.security_context.
func withSecurity(fields map[string]any) ctrOption {
	return func(cfg map[string]any) {
		linux := linuxSection(cfg)
		sc, _ := linux["security_context"].(map[string]any)
		if sc == nil {
			sc = map[string]any{}
			linux["security_context"] = sc
		}
		for k, v := range fields {
			sc[k] = v
		}
	}
}

// psLine is one process as busybox ps prints it.
type psLine struct {
	pid     int
	command string
}

// containerPs runs busybox ps in a container and returns its processes.
func (d *daemon) containerPs(t *testing.T, id string) []psLine {
	t.Helper()
	out := d.execSync(t, id, "ps")
	// The header says where COMMAND starts: "PID USER COMMAND", or with TIME.
	lines := strings.Split(out, "\n")
	header := strings.Fields(lines[0])
	if len(header) < 2 || header[0] != "PID" || header[len(header)-1] != "COMMAND" {
		t.Fatalf("ps in %s printed an unexpected header:\n%s", id, out)
	}
	var procs []psLine
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) < len(header) {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatalf("ps in %s printed %q", id, line)
		}
		procs = append(procs, psLine{pid, strings.Join(f[len(header)-1:], " ")})
	}
	if len(procs) == 0 {
		t.Fatalf("ps in %s printed no process:\n%s", id, out)
	}
	return procs
}

func countCommand(procs []psLine, command string) int {
	n := 0
	for _, p := range procs {
		if p.command == command {
			n++
		}
	}
	return n
}

func commandOf(procs []psLine, pid int) string {
	for _, p := range procs {
		if p.pid == pid {
			return p.command
		}
	}
	return ""
}
