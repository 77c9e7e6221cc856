package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Helpers of the real kubelet (Kubernetes v1.37.2, built by make kubelet from the nested
// module test/kubelet into bin/kubelet): a standalone kubelet (no API server, no
// kubeconfig) that runs static pods from a manifest directory of its own and drives a test
// daemon over its CRI socket, its start, stop, kill and restart, its view of the pods
// (the read-only port's /pods), and the removal of what it leaves on the node.

// kubeletReadyTimeout bounds how long a started kubelet may take to serve /pods on its
// read-only port.
const kubeletReadyTimeout = 60 * time.Second

// containerLogsDir is where every kubelet links its containers' logs
// (<pod>_<namespace>_<container>-<container ID>.log -> the log in its pod logs directory).
// The kubelet hard-codes it.
const containerLogsDir = "/var/log/containers"

// kubeletStateDir is the one directory of the machine's kubelet that every kubelet uses,
// whatever its root directory: the device plugin manager's socket and checkpoint in
// device-plugins are hard-coded (pluginapi.KubeletSocket).
const kubeletStateDir = "/var/lib/kubelet"

var (
	kubeletsMu   sync.Mutex
	kubeletsLive int      // kubelets of this process not yet cleaned up
	kubeletsMade []string // of containerLogsDir and kubeletStateDir, those they made
)

// enterKubelet counts a kubelet in; the first notes which of the machine's kubelet
// directories do not exist yet, so that leaveKubelet can remove them.
func enterKubelet() {
	kubeletsMu.Lock()
	defer kubeletsMu.Unlock()
	if kubeletsLive == 0 {
		kubeletsMade = nil
		for _, dir := range []string{containerLogsDir, kubeletStateDir} {
			if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
				kubeletsMade = append(kubeletsMade, dir)
			}
		}
	}
	kubeletsLive++
}

// leaveKubelet counts a kubelet out (it has exited); after the last, it removes what
// the kubelets made of the machine's kubelet directories: /var/log/containers when it
// is empty, and the device plugin socket and checkpoint with their directories.
func leaveKubelet(logf func(string, ...any)) {
	kubeletsMu.Lock()
	defer kubeletsMu.Unlock()
	kubeletsLive--
	if kubeletsLive > 0 {
		return
	}
	for _, dir := range kubeletsMade {
		var paths []string
		if dir == kubeletStateDir {
			plugins := filepath.Join(dir, "device-plugins")
			paths = append(paths, filepath.Join(plugins, "kubelet.sock"), filepath.Join(plugins, "kubelet_internal_checkpoint"), plugins)
		}
		for _, p := range append(paths, dir) {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				logf("cleanup: %v", err)
			}
		}
	}
	kubeletsMade = nil
}

var (
	kubeletOnce sync.Once
	kubeletPath string
	kubeletErr  string // empty when kubeletPath is executable
)

// requireKubelet returns the kubelet binary, $CRIJOURNAL_KUBELET (make test sets it to
// bin/kubelet, which make kubelet builds). Without it the test fails under CI=true and is
// skipped elsewhere, as with requirePrereqs.
func requireKubelet(t *testing.T) string {
	t.Helper()
	kubeletOnce.Do(func() {
		p := os.Getenv("CRIJOURNAL_KUBELET")
		switch {
		case p == "":
			kubeletErr = "kubelet tests need CRIJOURNAL_KUBELET, the kubelet v1.37.2 that make kubelet builds into bin/kubelet (make test sets it): run make kubelet"
		case !filepath.IsAbs(p):
			kubeletErr = fmt.Sprintf("CRIJOURNAL_KUBELET=%q is not an absolute path", p)
		case !isExecutable(p):
			kubeletErr = fmt.Sprintf("CRIJOURNAL_KUBELET=%q is not an executable file: run make kubelet", p)
		default:
			kubeletPath = p
		}
	})
	if kubeletErr != "" {
		testenv.Need(t, "%s", kubeletErr)
	}
	return kubeletPath
}

// kubeletOptions tune one kubelet. Zero values take the defaults noted.
type kubeletOptions struct {
	// runtimeRequestTimeout is the deadline of every CRI call but the long ones;
	// RunPodSandbox gets twice it, pulls none. Default 10s.
	runtimeRequestTimeout time.Duration
	// syncFrequency is the longest time between two syncs of a pod (a pod also syncs
	// when the runtime's events say it changed, every second). Default 2s.
	syncFrequency time.Duration
	// fileCheckFrequency is how often the manifest directory is listed (changes are also
	// seen at once through inotify). Default 1s.
	fileCheckFrequency time.Duration
	// config holds KubeletConfiguration fields (their JSON names) that replace the
	// harness's (see writeConfig).
	config map[string]any
	// verbosity is the kubelet's --v. Default 2.
	verbosity int
	// args are extra command-line flags.
	args []string
}

// kubelet is one standalone kubelet driving a test daemon. Everything of it lives in
// dir, /tmp/cjk<digits>: its root directory, static pod manifests, pod logs,
// certificates, configuration and log. Not under the daemon's node directory: the
// kubelet bind-mounts its root directory on itself (to make it rshared), and the
// daemon's leak checks count every mount under theirs. The owner file makes it a node
// to sweepStaleNodes, should the test process die before its cleanup.
type kubelet struct {
	d    *daemon
	opts kubeletOptions

	dir          string
	rootDir      string // --root-dir: pods' directories, checkpoints, sockets, state files
	manifestDir  string // staticPodPath
	podLogsDir   string // podLogsDir: the sandboxes' log directories
	certDir      string // --cert-dir: its self-signed serving certificate
	configPath   string // the KubeletConfiguration file
	logPath      string // its stderr and stdout
	nodeName     string // --hostname-override; static pods are named <name>-<nodeName>
	readOnlyPort int    // 127.0.0.1:<readOnlyPort>/pods

	mu      sync.Mutex
	proc    *os.Process
	done    chan struct{} // closed when proc has been waited for
	exitErr error         // valid once done is closed
	starts  int
}

// startKubelet starts a standalone kubelet on the daemon d (its CRI endpoint is d's
// socket) and waits until it serves /pods. Without QoS cgroups the kubelet gives its
// sandboxes no cgroup_parent, so its pods' cgroups are the daemon's default ones
// (/crijournal/crijournal-<ID>), not under d.cgroupParent. t.Cleanup stops it, removes
// the pods from the daemon, and removes its files, mounts and links in
// /var/log/containers; it runs before the daemon's cleanup (registered first).
func startKubelet(t *testing.T, d *daemon, opts kubeletOptions) *kubelet {
	t.Helper()
	bin := requireKubelet(t)
	if opts.runtimeRequestTimeout == 0 {
		opts.runtimeRequestTimeout = 10 * time.Second
	}
	if opts.syncFrequency == 0 {
		opts.syncFrequency = 2 * time.Second
	}
	if opts.fileCheckFrequency == 0 {
		opts.fileCheckFrequency = time.Second
	}
	if opts.verbosity == 0 {
		opts.verbosity = 2
	}
	// Not t.TempDir(): a node directory, /tmp/cjk<digits> (see kubelet).
	dir, err := os.MkdirTemp("", "cjk")
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{
		d:           d,
		opts:        opts,
		dir:         dir,
		rootDir:     filepath.Join(dir, "root"),
		manifestDir: filepath.Join(dir, "manifests"),
		podLogsDir:  filepath.Join(dir, "pod-logs"),
		certDir:     filepath.Join(dir, "pki"),
		configPath:  filepath.Join(dir, "kubelet.json"),
		logPath:     filepath.Join(dir, "kubelet.log"),
		// cjk<digits>: a lower-case DNS label, unique on the machine.
		nodeName:     filepath.Base(dir),
		readOnlyPort: freeLoopbackPort(t),
	}
	enterKubelet()
	t.Cleanup(func() { k.cleanup(t) })
	writeFile(t, filepath.Join(dir, ownerFile), selfOwner(), 0o644)
	for _, p := range []string{k.rootDir, k.manifestDir, k.podLogsDir, k.certDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	k.writeConfig(t)
	t.Logf("kubelet: dir %s, node %s, read-only port %d", k.dir, k.nodeName, k.readOnlyPort)
	k.start(t, bin)
	k.waitReady(t)
	return k
}

// freeLoopbackPort returns a TCP port of 127.0.0.1 that nothing listens on now.
func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// writeConfig writes the KubeletConfiguration, with opts.config over the harness's
// settings:
//   - no server but the read-only port on 127.0.0.1 (no TLS port to collide on, no
//     healthz port), anonymous authentication and AlwaysAllow authorization (the
//     defaults ask an API server);
//   - cgroupfs, no QoS cgroups and no node allocatable enforcement, so the kubelet makes
//     no cgroup hierarchy (and sends no cgroup_parent);
//   - failCgroupV1 false where the machine has cgroup v1 (hybrid cgroups here; v1.35+
//     refuses cgroup v1 by default), left at its default on a cgroup v2 node (make
//     test-vm); failSwapOn false;
//   - no image garbage collection (the high threshold at 100%), no hard eviction, no
//     iptables chains on the host, no OOM score for itself (the machine lacks
//     CAP_SYS_RESOURCE), the flexvolume directory in its own dir.
func (k *kubelet) writeConfig(t *testing.T) {
	t.Helper()
	cfg := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"containerRuntimeEndpoint": "unix://" + k.d.socket,
		"staticPodPath":            k.manifestDir,
		"podLogsDir":               k.podLogsDir,
		"syncFrequency":            k.opts.syncFrequency.String(),
		"fileCheckFrequency":       k.opts.fileCheckFrequency.String(),
		"runtimeRequestTimeout":    k.opts.runtimeRequestTimeout.String(),
		"enableServer":             false,
		"address":                  "127.0.0.1",
		"readOnlyPort":             k.readOnlyPort,
		"healthzPort":              0,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
		},
		"authorization":               map[string]any{"mode": "AlwaysAllow"},
		"cgroupDriver":                "cgroupfs",
		"cgroupsPerQOS":               false,
		"enforceNodeAllocatable":      []string{},
		"failSwapOn":                  false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard":                map[string]string{},
		"makeIPTablesUtilChains":      false,
		"oomScoreAdj":                 0,
		"volumePluginDir":             filepath.Join(k.dir, "volume-plugins"),
		"serializeImagePulls":         false,
		"registerNode":                false,
	}
	if !cgroupV2Node() {
		cfg["failCgroupV1"] = false
	}
	for key, v := range k.opts.config {
		cfg[key] = v
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, k.configPath, string(b)+"\n", 0o644)
}

// start starts the kubelet process; it does not wait for it to be ready.
func (k *kubelet) start(t *testing.T, bin string) {
	t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != nil {
		t.Fatal("start: the kubelet is already running")
	}
	logf, err := os.OpenFile(k.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	k.starts++
	fmt.Fprintf(logf, "=== e2e: kubelet start %d at %s ===\n", k.starts, time.Now().Format(time.RFC3339Nano))
	args := append([]string{
		"--config", k.configPath,
		"--root-dir", k.rootDir,
		"--cert-dir", k.certDir,
		"--hostname-override", k.nodeName,
		"--v", strconv.Itoa(k.opts.verbosity),
	}, k.opts.args...)
	cmd := exec.Command(bin, args...)
	cmd.Env = daemonEnv(nil)
	cmd.Dir = k.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	// Tracked with the daemons: TestMain kills any still running after the tests.
	trackDaemon(cmd.Process)
	done := make(chan struct{})
	k.proc, k.done = cmd.Process, done
	go func() {
		err := cmd.Wait()
		untrackDaemon(cmd.Process)
		k.mu.Lock()
		k.exitErr = err
		k.mu.Unlock()
		close(done)
	}()
	t.Logf("kubelet started (pid %d, start %d)", cmd.Process.Pid, k.starts)
}

// running reports whether the kubelet process is alive, with its done channel.
func (k *kubelet) running() (bool, chan struct{}) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil {
		return false, nil
	}
	select {
	case <-k.done:
		return false, k.done
	default:
		return true, k.done
	}
}

// reap forgets a process that has exited (k.done closed).
func (k *kubelet) reap() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != nil {
		select {
		case <-k.done:
			k.proc = nil
		default:
		}
	}
}

func (k *kubelet) lastExit() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.exitErr == nil {
		return "exit status 0"
	}
	return k.exitErr.Error()
}

// waitReady polls the read-only port's /pods until the kubelet answers.
func (k *kubelet) waitReady(t *testing.T) {
	t.Helper()
	start := time.Now()
	err := testenv.Poll(kubeletReadyTimeout, 200*time.Millisecond, func() error {
		if alive, _ := k.running(); !alive {
			k.reap()
			t.Fatalf("kubelet exited before it was ready (%v); log:\n%s", k.lastExit(), k.logTail(60))
		}
		_, err := k.getPods()
		return err
	})
	if err != nil {
		t.Fatalf("kubelet did not serve /pods within %v (last error: %v); log:\n%s", kubeletReadyTimeout, err, k.logTail(100))
	}
	t.Logf("kubelet ready after %v", time.Since(start).Round(time.Millisecond))
}

// stop sends SIGTERM and waits for the kubelet to exit; after stopTimeout it kills it
// (by PID) and fails the test. The kubelet leaves its pods running, as on a node.
func (k *kubelet) stop(t *testing.T) {
	t.Helper()
	k.mu.Lock()
	p, done := k.proc, k.done
	k.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-done:
		t.Logf("kubelet (pid %d) stopped: %s", p.Pid, k.lastExit())
	case <-time.After(stopTimeout):
		_ = p.Kill()
		<-done
		t.Errorf("kubelet (pid %d) did not exit within %v of SIGTERM; killed", p.Pid, stopTimeout)
	}
	k.reap()
}

// kill sends SIGKILL to the kubelet (by PID) and waits for it to die. Its pods, and
// the daemon's work on them, go on.
func (k *kubelet) kill(t *testing.T) {
	t.Helper()
	k.mu.Lock()
	p, done := k.proc, k.done
	k.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Kill()
	<-done
	t.Logf("kubelet (pid %d) killed: %s", p.Pid, k.lastExit())
	k.reap()
}

// restart starts the kubelet again on the same directories and manifests, as after a
// crash: one still running is killed first (SIGKILL). It waits until it serves /pods.
// The restarted kubelet sees its static pods anew (a new kubernetes.io/config.seen) and
// finds their sandboxes and containers through the runtime.
func (k *kubelet) restart(t *testing.T) {
	t.Helper()
	k.kill(t)
	k.start(t, requireKubelet(t))
	k.waitReady(t)
}

// cleanup runs at the end of the test: it stops the kubelet, removes every pod from
// the daemon (which the daemon's own cleanup would do next anyway), then what the
// kubelet left: links in /var/log/containers to its pods' logs, mounts under its
// directory, the directory, and after the process's last kubelet, what they made of
// /var/log/containers and /var/lib/kubelet (see leaveKubelet).
func (k *kubelet) cleanup(t *testing.T) {
	if alive, _ := k.running(); alive {
		k.stop(t)
	}
	defer leaveKubelet(t.Logf)
	if t.Failed() {
		t.Logf("kubelet log %s (last 200 lines):\n%s", k.logPath, k.logTail(200))
	}
	if alive, _ := k.d.running(); alive {
		if _, stderr, err := k.d.crictlTimeout(90*time.Second, "rmp", "-fa"); err != nil {
			t.Logf("cleanup: crictl rmp -fa: %v: %s", err, stderr)
		}
	}
	for _, l := range k.logLinks() {
		if err := os.Remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Logf("cleanup: %v", err)
		}
	}
	for _, m := range mountsBelow(k.dir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(k.dir); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// logLinks lists the links in /var/log/containers to this kubelet's pods' logs.
func (k *kubelet) logLinks() []string {
	entries, err := os.ReadDir(containerLogsDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		p := filepath.Join(containerLogsDir, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, k.podLogsDir+"/") {
			out = append(out, p)
		}
	}
	return out
}

// logTail returns the last n lines of the kubelet's log.
func (k *kubelet) logTail(n int) string {
	b, err := os.ReadFile(k.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
