package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	mathrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// cniDir is where Debian installs the reference CNI plugins.
const cniDir = "/usr/lib/cni"

// goBuildTags are the build tags of the daemon (GOTAGS in the Makefile).
const goBuildTags = "containers_image_openpgp,exclude_graphdriver_btrfs"

// readyTimeout bounds how long a started daemon may take to answer crictl version.
const readyTimeout = 15 * time.Second

// stopTimeout bounds how long a daemon may take to exit after SIGTERM before it
// is killed.
const stopTimeout = 15 * time.Second

// ---------------------------------------------------------------------------
// Prerequisites

var (
	prereqOnce sync.Once
	prereqErr  string // empty when everything is there
	crictlPath string
)

// requirePrereqs stops the test unless it runs as root with crictl, the tools
// and the CNI plugins installed: it fails under CI=true, where they must be,
// and skips elsewhere.
func requirePrereqs(t *testing.T) {
	t.Helper()
	prereqOnce.Do(func() { prereqErr = checkPrereqs() })
	if prereqErr == "" {
		return
	}
	testenv.Need(t, "%s", prereqErr)
}

func checkPrereqs() string {
	if os.Geteuid() != 0 {
		return "end-to-end tests need root (run as root, e.g. sudo make test)"
	}
	crictlPath = findCrictl()
	if crictlPath == "" {
		return "end-to-end tests need crictl in PATH, /root/go/bin or /usr/local/bin (make deps installs it)"
	}
	for _, tool := range []string{"ip", "nsenter", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Sprintf("end-to-end tests need %s in PATH (Debian: iproute2, util-linux, bash)", tool)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if !isExecutable(filepath.Join(cniDir, plugin)) {
			return fmt.Sprintf("end-to-end tests need the CNI plugin %s in %s (Debian: containernetworking-plugins)", plugin, cniDir)
		}
	}
	return ""
}

func findCrictl() string {
	if p, err := exec.LookPath("crictl"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
		return p
	}
	for _, p := range []string{"/root/go/bin/crictl", "/usr/local/bin/crictl"} {
		if isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// ---------------------------------------------------------------------------
// The daemon binary

var (
	binOnce  sync.Once
	binPath  string
	binErr   error
	builtDir string // temp dir of a binary built by the harness, removed by TestMain
)

// daemonBinary returns the daemon to test: $CRIJOURNAL_BIN (set by make
// test), or one built from this module once per test binary run.
func daemonBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() { binPath, binErr = findOrBuildDaemon() })
	if binErr != nil {
		t.Fatalf("daemon binary: %v", binErr)
	}
	return binPath
}

func findOrBuildDaemon() (string, error) {
	if p := os.Getenv("CRIJOURNAL_BIN"); p != "" {
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("CRIJOURNAL_BIN=%q is not an absolute path", p)
		}
		if !isExecutable(p) {
			return "", fmt.Errorf("CRIJOURNAL_BIN=%q is not an executable file (run make build)", p)
		}
		return p, nil
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
		if !isExecutable(gobin) {
			return "", errors.New("CRIJOURNAL_BIN is not set and no go command was found to build the daemon")
		}
	}
	out, err := exec.Command(gobin, "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the crijournal module")
	}
	dir, err := os.MkdirTemp("", "cjbin")
	if err != nil {
		return "", err
	}
	builtDir = dir
	bin := filepath.Join(dir, "crijournal")
	cmd := exec.Command(gobin, "build", "-tags", goBuildTags, "-o", bin, "./cmd/crijournal")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/crijournal (CRIJOURNAL_BIN is not set): %v\n%s", err, out)
	}
	return bin, nil
}

func removeBuiltBinary() {
	if builtDir != "" {
		os.RemoveAll(builtDir)
	}
}

// ---------------------------------------------------------------------------
// Daemons started by this process, so that none outlives the tests.

var (
	liveMu      sync.Mutex
	liveDaemons = map[int]*os.Process{}
)

func trackDaemon(p *os.Process)   { liveMu.Lock(); liveDaemons[p.Pid] = p; liveMu.Unlock() }
func untrackDaemon(p *os.Process) { liveMu.Lock(); delete(liveDaemons, p.Pid); liveMu.Unlock() }

// killStrayDaemons sends SIGKILL to every daemon this process started that
// has not been waited for, and returns their PIDs.
func killStrayDaemons() []int {
	liveMu.Lock()
	defer liveMu.Unlock()
	var pids []int
	for pid, p := range liveDaemons {
		_ = p.Kill()
		pids = append(pids, pid)
	}
	return pids
}

// ---------------------------------------------------------------------------
// Nodes left by a test process that died (killed, or SIGPIPE on its output)
// before its cleanups ran: swept at the start of the next run.

// ownerFile, in a node's directory, names the test process that made it.
const ownerFile = "e2e-owner"

// selfOwner identifies this process: its PID and start time (so that a reused
// PID does not pass for it).
func selfOwner() string { return fmt.Sprintf("%d %s", os.Getpid(), procStart(os.Getpid())) }

// procStart returns the start time of a process (field 22 of
// /proc/<pid>/stat), or "" when it does not exist.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}

// sweepStaleNodes removes the nodes of test processes that are gone: their
// mounts, bridges and directories. Their daemons died with them (parent-death
// signal). It returns what it removed.
func sweepStaleNodes() []string {
	if os.Geteuid() != 0 {
		return nil
	}
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "cj*"))
	var swept []string
	for _, dir := range dirs {
		owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // not a node, or one being made
		}
		var pid int
		var start string
		if n, _ := fmt.Sscanf(string(owner), "%d %s", &pid, &start); n == 2 && procStart(pid) == start {
			continue // its test process is alive
		}
		sweepContainers(dir)
		for _, m := range mountsBelow(dir) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "net.d", "10-cjtest.conflist")); err == nil {
			var conf struct {
				Plugins []struct {
					Bridge string `json:"bridge"`
				} `json:"plugins"`
			}
			if json.Unmarshal(b, &conf) == nil && len(conf.Plugins) > 0 && strings.HasPrefix(conf.Plugins[0].Bridge, "cjt") {
				_ = exec.Command("ip", "link", "del", conf.Plugins[0].Bridge).Run()
			}
		}
		if os.RemoveAll(dir) == nil {
			swept = append(swept, dir)
		}
	}
	return swept
}

// mountsBelow lists the mount points in this mount namespace at or below
// dir, deepest first.
func mountsBelow(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 {
			if mp := unescapeMountPath(f[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
				out = append(out, mp)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// ---------------------------------------------------------------------------
// Unique networks

var (
	netSeq atomic.Uint32
	netMu  sync.Mutex
)

// 10.100.0.0 - 10.219.255.0: clear of 10.85 (make run's cni0) and 10.88
// (the netns package's tests).
const subnetSpace = 120 * 250

func init() { netSeq.Store(mathrand.Uint32N(subnetSpace)) }

// newNetwork picks a bridge name and a /24 that no interface of the host
// uses, unique within this process (a counter) and likely across processes
// (a random start).
func newNetwork(t *testing.T) (bridge, subnet string, third [3]byte) {
	t.Helper()
	netMu.Lock()
	defer netMu.Unlock()
	for range 50 {
		n := netSeq.Add(1) % subnetSpace
		a, b := byte(100+n/250), byte(1+n%250)
		cidr := fmt.Sprintf("10.%d.%d.0/24", a, b)
		out, err := exec.Command("ip", "-o", "addr", "show", "to", cidr).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			continue
		}
		out, err = exec.Command("ip", "-o", "route", "show", "root", cidr).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			continue
		}
		name := "cjt" + randomHex(t, 3)
		if _, err := net.InterfaceByName(name); err == nil {
			continue
		}
		return name, cidr, [3]byte{10, a, b}
	}
	t.Fatal("no free bridge name and 10.x.y.0/24 subnet found in 50 tries")
	return "", "", [3]byte{}
}

// randomHex returns n random bytes as hex.
func randomHex(t *testing.T, n int) string { return testenv.RandomHex(t, n) }

// randomID returns a random ID shaped like a sandbox ID.
func randomID(t *testing.T) string { return randomHex(t, 32) }

var idRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ---------------------------------------------------------------------------
// The daemon

// daemonOptions tune one daemon. Zero values take the defaults noted.
type daemonOptions struct {
	cacheTTL       time.Duration    // cache_ttl; default 2m
	sweepInterval  time.Duration    // cache_sweep_interval; default 1s
	networkTimeout time.Duration    // network_timeout; default 5m
	env            []string         // extra environment, such as failpoints
	extraTOML      []string         // extra top-level lines of the configuration file
	registries     []registryMirror // [[registries]] pull redirections (image tests)
	conmonPath     string           // conmon_path; default: conmon in PATH
	runtimePath    string           // runtimes.runc.path; default: runc in PATH
	secondHandler  string           // a second runtime handler (runc, root <run_root>/runc-<name>); default none
	storageDriver  string           // storage_driver; default vfs
	// nodeFiles are written in the node's directory before the daemon starts, by name:
	// registries.conf, registries.conf.d/<name>, policy.json (default: accept anything)
	// and auth.json, which the daemon reads as the node's containers files.
	nodeFiles  map[string]string
	journalDir string // the directory of journal_path (a file system of its own); default root
}

// registryMirror is one [[registries]] entry of the daemon's configuration.
type registryMirror struct {
	prefix, location string
	insecure         bool
}

// daemon is one crijournal serving on its own socket, with its own
// directories, CNI network (a bridge and a /24) and CNI plugin wrapper.
type daemon struct {
	opts daemonOptions

	base       string // temp dir holding everything below
	root       string
	runRoot    string
	socket     string
	nsDir      string
	confDir    string
	pluginDir  string // the wrapper bridge plugin, first in cni_plugin_dirs
	cacheDir   string // libcni's cache
	ipamDir    string // host-local's dataDir
	configPath string
	logPath    string

	// Containers (see container_test.go).
	podLogDir    string // the kubelet's pod log directories live here
	cgroupParent string // cgroup_parent of the container tests' pods
	ociStateDir  string // conmon's state directory (exit files, attach sockets)

	bridge  string // Linux bridge of the pod network
	network string // CNI network name
	subnet  string // 10.a.b.0/24
	gateway string // 10.a.b.1

	mu      sync.Mutex
	proc    *os.Process
	done    chan struct{} // closed when proc has been waited for
	exitErr error         // valid once done is closed
	starts  int
}

// startDaemon creates a fresh node (directories, CNI configuration with a new
// bridge and subnet, the plugin wrapper), starts a daemon on it and waits
// until it answers crictl. t.Cleanup removes sandboxes left behind, stops the
// daemon and cleans the node.
func startDaemon(t *testing.T, opts daemonOptions) *daemon {
	t.Helper()
	requirePrereqs(t)
	bin := daemonBinary(t)
	if opts.cacheTTL == 0 {
		opts.cacheTTL = 2 * time.Minute
	}
	if opts.sweepInterval == 0 {
		opts.sweepInterval = time.Second
	}
	if opts.networkTimeout == 0 {
		opts.networkTimeout = 5 * time.Minute
	}
	// Not t.TempDir(): the socket path must stay well under 108 bytes.
	base, err := os.MkdirTemp("", "cj")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{
		opts:       opts,
		base:       base,
		root:       filepath.Join(base, "root"),
		runRoot:    filepath.Join(base, "run"),
		socket:     filepath.Join(base, "crijournal.sock"),
		nsDir:      filepath.Join(base, "ns"),
		confDir:    filepath.Join(base, "net.d"),
		pluginDir:  filepath.Join(base, "plugins"),
		cacheDir:   filepath.Join(base, "cni-cache"),
		ipamDir:    filepath.Join(base, "ipam"),
		configPath: filepath.Join(base, "crijournal.toml"),
		logPath:    filepath.Join(base, "daemon.log"),
		network:    "cjtest",
	}
	d.podLogDir = filepath.Join(base, "pod-logs")
	d.cgroupParent = "/cje2e-" + filepath.Base(base)
	d.ociStateDir = oci.StateDirFor(d.runRoot, "runc")
	var ip [3]byte
	d.bridge, d.subnet, ip = newNetwork(t)
	d.gateway = fmt.Sprintf("%d.%d.%d.1", ip[0], ip[1], ip[2])
	t.Cleanup(func() { d.cleanup(t) })
	writeFile(t, filepath.Join(base, ownerFile), selfOwner(), 0o644)

	for _, dir := range []string{d.root, d.runRoot, d.nsDir, d.confDir, d.pluginDir, d.cacheDir, d.ipamDir, d.podLogDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	d.writeCNIConfig(t)
	d.writeWrapper(t)
	d.writeNodeFiles(t)
	d.writeConfig(t)
	t.Logf("node: dir %s, bridge %s, subnet %s", d.base, d.bridge, d.subnet)
	d.start(t, bin)
	d.waitReady(t)
	return d
}

func (d *daemon) writeCNIConfig(t *testing.T) {
	t.Helper()
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       d.network,
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      d.bridge,
			"isGateway":   true,
			"ipMasq":      false,
			"hairpinMode": false,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": d.subnet}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": d.ipamDir,
			},
		}},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(d.confDir, "10-cjtest.conflist"), string(b), 0o644)
}

// writeWrapper installs the bridge plugin wrapper: it reads the duration in
// cni-sleep (for any command but VERSION), logs the call to cni-calls.log
// ("<COMMAND> <container ID>"), sleeps that long, fails with a CNI error when
// cni-fail-<COMMAND> exists, runs the real ADD and then fails when
// cni-fail-late-ADD exists (see failCNILate), crashes when cni-crash-<COMMAND>,
// cni-crash-late-<COMMAND> or cni-exit-<COMMAND> exists (see cniFault), and otherwise execs the real
// plugin (so the daemon's parent-death signal still reaches it).
func (d *daemon) writeWrapper(t *testing.T) {
	t.Helper()
	script := `#!/bin/bash
# crijournal end-to-end tests: the bridge plugin, slowed or failed (early or late) on demand.
dir=` + shellQuote(d.base) + `
delay=
if [ "${CNI_COMMAND}" != VERSION ] && [ -f "$dir/cni-sleep" ]; then
	delay="$(cat "$dir/cni-sleep")"
fi
# Logged after reading the delay: once a call is logged, cni-sleep may change.
echo "${CNI_COMMAND} ${CNI_CONTAINERID}" >> "$dir/cni-calls.log"
if [ -n "$delay" ]; then
	sleep "$delay"
fi
if [ -e "$dir/cni-fail-${CNI_COMMAND}" ]; then
	msg="$(cat "$dir/cni-fail-${CNI_COMMAND}")"
	echo "{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"${msg:-injected failure}\"}"
	exit 1
fi
# Crashes (see cniFault): killed before the command, killed after the real
# plugin did it, or an exit without a CNI error.
if [ -e "$dir/cni-crash-${CNI_COMMAND}" ]; then
	kill -KILL $$
fi
if [ -e "$dir/cni-crash-late-${CNI_COMMAND}" ]; then
	` + cniDir + `/bridge "$@" >/dev/null
	kill -KILL $$
fi
if [ -e "$dir/cni-exit-${CNI_COMMAND}" ]; then
	echo "injected exit without a CNI error" >&2
	exit 2
fi
if [ "${CNI_COMMAND}" = ADD ] && [ -e "$dir/cni-fail-late-ADD" ]; then
	` + cniDir + `/bridge "$@" >/dev/null
	echo '{"cniVersion":"1.0.0","code":11,"msg":"` + lateFailure + `"}'
	exit 1
fi
exec ` + cniDir + `/bridge "$@"
`
	writeFile(t, filepath.Join(d.pluginDir, "bridge"), script, 0o755)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (d *daemon) writeConfig(t *testing.T) {
	t.Helper()
	q := strconv.Quote
	lines := []string{
		"# crijournal end-to-end test daemon",
		"root = " + q(d.root),
		"run_root = " + q(d.runRoot),
		"socket = " + q(d.socket),
		"namespace_dir = " + q(d.nsDir),
		"cni_conf_dir = " + q(d.confDir),
		fmt.Sprintf("cni_plugin_dirs = [%s, %s]", q(d.pluginDir), q(cniDir)),
		"cni_cache_dir = " + q(d.cacheDir),
		"network_timeout = " + q(d.opts.networkTimeout.String()),
		"cache_ttl = " + q(d.opts.cacheTTL.String()),
		"cache_sweep_interval = " + q(d.opts.sweepInterval.String()),
		`undo_retry_min = "200ms"`,
		`undo_retry_max = "2s"`,
		`journal_lock_timeout = "5s"`,
		`log_level = "debug"`,
		`log_format = "text"`,
	}
	if d.opts.storageDriver == "" {
		lines = append(lines, `storage_driver = "vfs"`)
	} else {
		lines = append(lines, "storage_driver = "+q(d.opts.storageDriver))
	}
	if d.opts.conmonPath != "" {
		lines = append(lines, "conmon_path = "+q(d.opts.conmonPath))
	}
	// The node's containers files are the test's own, never /etc/containers.
	lines = append(lines,
		"registries_conf = "+q(filepath.Join(d.base, "registries.conf")),
		"registries_conf_dir = "+q(filepath.Join(d.base, "registries.conf.d")),
		"signature_policy = "+q(filepath.Join(d.base, "policy.json")),
		"global_auth_file = "+q(filepath.Join(d.base, "auth.json")),
	)
	if d.opts.journalDir != "" {
		lines = append(lines, "journal_path = "+q(d.journalPath()))
	}
	lines = append(lines, d.opts.extraTOML...)
	lines = append(lines, "", "[runtimes.runc]", "root = "+q(filepath.Join(d.runRoot, "runc")))
	if d.opts.runtimePath != "" {
		lines = append(lines, "path = "+q(d.opts.runtimePath))
	}
	if h := d.opts.secondHandler; h != "" {
		lines = append(lines, "", "[runtimes."+h+"]", "root = "+q(d.handlerRoot(h)))
	}
	for _, r := range d.opts.registries {
		lines = append(lines, "", "[[registries]]", "prefix = "+q(r.prefix), "location = "+q(r.location), fmt.Sprintf("insecure = %v", r.insecure))
	}
	writeFile(t, d.configPath, strings.Join(lines, "\n")+"\n", 0o644)
}

// permissivePolicy is the signature policy of a test node: accept anything.
const permissivePolicy = `{"default": [{"type": "insecureAcceptAnything"}]}`

// writeNodeFiles writes opts.nodeFiles, and the permissive policy.json unless they have one.
func (d *daemon) writeNodeFiles(t *testing.T) {
	t.Helper()
	files := map[string]string{"policy.json": permissivePolicy}
	maps.Copy(files, d.opts.nodeFiles)
	for name, content := range files {
		path := filepath.Join(d.base, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, content, 0o600)
	}
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// daemonEnv is this process's environment without CRIJOURNAL_* variables
// (make test sets CRIJOURNAL_BIN), plus extra.
func daemonEnv(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CRIJOURNAL_") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// start starts the daemon process; it does not wait for it to be ready.
func (d *daemon) start(t *testing.T, bin string) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc != nil {
		t.Fatal("start: the daemon is already running")
	}
	logf, err := os.OpenFile(d.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	d.starts++
	fmt.Fprintf(logf, "=== e2e: start %d at %s ===\n", d.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, "serve", "--config", d.configPath)
	cmd.Env = daemonEnv(d.opts.env)
	cmd.Dir = d.base
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	trackDaemon(cmd.Process)
	done := make(chan struct{})
	d.proc, d.done = cmd.Process, done
	go func() {
		err := cmd.Wait()
		untrackDaemon(cmd.Process)
		d.mu.Lock()
		d.exitErr = err
		d.mu.Unlock()
		close(done)
	}()
	t.Logf("daemon started (pid %d, start %d)", cmd.Process.Pid, d.starts)
}

// running reports whether the daemon process is alive, with its done channel.
func (d *daemon) running() (bool, chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc == nil {
		return false, nil
	}
	select {
	case <-d.done:
		return false, d.done
	default:
		return true, d.done
	}
}

// waitReady polls crictl version until the daemon answers.
func (d *daemon) waitReady(t *testing.T) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(readyTimeout)
	var lastErr string
	for time.Now().Before(deadline) {
		if alive, _ := d.running(); !alive {
			d.reap()
			t.Fatalf("daemon exited before it was ready (%v); log:\n%s", d.lastExit(), d.logTail(100))
		}
		stdout, stderr, err := d.crictlTimeout(2*time.Second, "version")
		if err == nil && strings.Contains(stdout, "RuntimeName") {
			t.Logf("daemon ready after %v", time.Since(start).Round(time.Millisecond))
			return
		}
		lastErr = strings.TrimSpace(stderr)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("daemon did not answer crictl version within %v (last error: %s); log:\n%s", readyTimeout, lastErr, d.logTail(100))
}

// reap forgets a process that has exited (d.done closed).
func (d *daemon) reap() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc != nil {
		select {
		case <-d.done:
			d.proc = nil
		default:
		}
	}
}

func (d *daemon) lastExit() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.exitErr == nil {
		return "exit status 0"
	}
	return d.exitErr.Error()
}

// stop sends SIGTERM and waits for the daemon to exit; after stopTimeout it
// kills it (by PID) and fails the test.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	p, done := d.proc, d.done
	d.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-done:
		t.Logf("daemon (pid %d) stopped: %s", p.Pid, d.lastExit())
	case <-time.After(stopTimeout):
		_ = p.Kill()
		<-done
		t.Errorf("daemon (pid %d) did not exit within %v of SIGTERM; killed", p.Pid, stopTimeout)
	}
	d.reap()
}

// kill sends SIGKILL to the daemon (by PID) and waits for it to die.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	d.mu.Lock()
	p, done := d.proc, d.done
	d.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.Kill()
	<-done
	t.Logf("daemon (pid %d) killed: %s", p.Pid, d.lastExit())
	d.reap()
}

// restart stops the daemon if it runs, starts it again on the same node and
// waits until it is ready.
func (d *daemon) restart(t *testing.T) {
	t.Helper()
	d.stop(t)
	d.start(t, daemonBinary(t))
	d.waitReady(t)
}

// cleanup runs at the end of the test: it removes the sandboxes still
// listed, stops the daemon, and removes whatever is left on the node (mounts,
// the bridge, the directories).
func (d *daemon) cleanup(t *testing.T) {
	if alive, _ := d.running(); alive {
		if ids, _, err := d.crictlTimeout(10*time.Second, "pods", "-q"); err == nil {
			for _, id := range strings.Fields(ids) {
				if _, stderr, err := d.crictlTimeout(30*time.Second, "stopp", id); err != nil {
					t.Logf("cleanup: stopp %s: %v: %s", id, err, stderr)
				}
				if _, stderr, err := d.crictlTimeout(30*time.Second, "rmp", "-f", id); err != nil {
					t.Logf("cleanup: rmp %s: %v: %s", id, err, stderr)
				}
			}
		}
		d.stop(t)
	}
	// Containers the test left (it failed, or stopped early): they outlive the
	// daemon, so they are removed here.
	d.removeContainersLeft(t)
	if t.Failed() {
		t.Logf("daemon log %s (last 300 lines):\n%s", d.logPath, d.logTail(300))
		if calls, err := os.ReadFile(filepath.Join(d.base, "cni-calls.log")); err == nil {
			t.Logf("CNI plugin calls:\n%s", calls)
		}
	}
	// Pause processes of sandboxes left behind (they outlive the daemon, as
	// containers do), found through their pid namespace pins, so before those go.
	removePauseProcesses(t.Logf, d.nsDir)
	// Mounts first (deepest first), so that namespaces die and take their
	// veths with them, then the bridge, then the files.
	for _, m := range mountsBelow(d.base) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmount %s: %v", m, err)
		}
	}
	if _, err := net.InterfaceByName(d.bridge); err == nil {
		if out, err := exec.Command("ip", "link", "del", d.bridge).CombinedOutput(); err != nil {
			t.Logf("cleanup: ip link del %s: %v: %s", d.bridge, err, out)
		}
	}
	if err := os.RemoveAll(d.base); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// logTail returns the last n lines of the daemon's log.
func (d *daemon) logTail(n int) string {
	b, err := os.ReadFile(d.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// ---------------------------------------------------------------------------
// crictl

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

// crictlTimeout runs crictl, killing it after limit.
func (d *daemon) crictlTimeout(limit time.Duration, args ...string) (stdout, stderr string, err error) {
	if crictlPath == "" {
		return "", "", errors.New("crictl not found")
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	full := append([]string{
		"--config", os.DevNull,
		"--runtime-endpoint", "unix://" + d.socket,
		"--image-endpoint", "unix://" + d.socket,
		"--timeout", "30s",
	}, args...)
	cmd := exec.CommandContext(ctx, crictlPath, full...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("crictl %s killed after %v: %w", strings.Join(args, " "), limit, err)
	}
	return out.String(), errb.String(), err
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
	conn, err := grpc.NewClient("unix://"+d.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("gRPC client on %s: %v", d.socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewRuntimeServiceClient(conn)
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

// ---------------------------------------------------------------------------
// Pod configurations

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

// ---------------------------------------------------------------------------
// The CNI plugin wrapper

// slowCNI makes every later call of the bridge plugin (but VERSION) sleep d
// first; 0 makes it fast again. A call already sleeping is not affected.
func (d *daemon) slowCNI(t *testing.T, dur time.Duration) {
	t.Helper()
	path := filepath.Join(d.base, "cni-sleep")
	if dur <= 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, strconv.FormatFloat(dur.Seconds(), 'f', 3, 64)+"\n", 0o644)
}

// failCNI makes the bridge plugin fail every call of the CNI command (ADD,
// DEL, CHECK) with a CNI error while on (with the message in the file
// cni-fail-<COMMAND>, "injected failure" when it is empty).
func (d *daemon) failCNI(t *testing.T, command string, on bool) {
	t.Helper()
	path := filepath.Join(d.base, "cni-fail-"+command)
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, "", 0o644)
}

// cniCall is one call of the bridge plugin wrapper.
type cniCall struct{ command, containerID string }

// cniCalls returns the calls of the bridge plugin so far, oldest first.
func (d *daemon) cniCalls(t *testing.T) []cniCall {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.base, "cni-calls.log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var calls []cniCall
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 2 {
			calls = append(calls, cniCall{f[0], f[1]})
		}
	}
	return calls
}

// addedIDs returns the sandbox IDs of the CNI ADD calls so far.
func (d *daemon) addedIDs(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, c := range d.cniCalls(t) {
		if c.command == "ADD" {
			ids = append(ids, c.containerID)
		}
	}
	return ids
}

// waitADD waits until the nth (1-based) CNI ADD has been called and returns
// its sandbox ID.
func (d *daemon) waitADD(t *testing.T, n int, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if ids := d.addedIDs(t); len(ids) >= n {
			return ids[n-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("CNI ADD number %d was not called within %v (calls: %v)", n, within, d.cniCalls(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cniResultPath is libcni's cached ADD result of a sandbox; libcni writes it
// when ADD succeeded, just before returning to the daemon.
func (d *daemon) cniResultPath(id string) string {
	return filepath.Join(d.cacheDir, "results", d.network+"-"+id+"-eth0")
}

// waitNetworkDone waits until the CNI ADD of the sandbox has returned to the
// daemon (libcni cached its result), then a moment more for the daemon to
// settle the record (journal commits take well under a millisecond here).
func (d *daemon) waitNetworkDone(t *testing.T, id string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, err := os.Stat(d.cniResultPath(id)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CNI ADD of %s did not finish within %v (calls: %v)", id, within, d.cniCalls(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
}

// ---------------------------------------------------------------------------
// The journal

// records reads every record of the journal file. The daemon must be
// stopped: it holds the file's lock while it runs.
func (d *daemon) records(t *testing.T) []journal.Record {
	t.Helper()
	j := d.openJournal(t)
	defer j.Close()
	return j.List(nil)
}

// checkJournal fails the test if bbolt's consistency check or the journal's
// invariants find a problem. The daemon must be stopped.
func (d *daemon) checkJournal(t *testing.T) {
	t.Helper()
	j := d.openJournal(t)
	defer j.Close()
	for _, err := range j.Check() {
		t.Errorf("journal %s: %v", d.journalPath(), err)
	}
}

func (d *daemon) journalPath() string {
	if d.opts.journalDir != "" {
		return filepath.Join(d.opts.journalDir, "journal.db")
	}
	return filepath.Join(d.root, "journal.db")
}

func (d *daemon) openJournal(t *testing.T) *journal.Journal {
	t.Helper()
	if alive, _ := d.running(); alive {
		t.Fatal("the journal can only be read while the daemon is stopped")
	}
	j, err := journal.Open(d.journalPath(), journal.Options{ReadOnly: true, LockTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("open the journal: %v", err)
	}
	return j
}

func describeRecord(r journal.Record) string {
	return fmt.Sprintf("%s %s %q state %s stage %q holds name %v, %d steps", r.Kind, r.ID, r.Name, r.State, r.Stage, r.HoldsName, len(r.Steps))
}

// ---------------------------------------------------------------------------
// The node

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// netnsPin is where the daemon pins a sandbox's network namespace.
func (d *daemon) netnsPin(id string) string { return filepath.Join(d.nsDir, "netns", id) }

// isNamespace reports whether path is a namespace file (a live pin).
func isNamespace(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// inNetns runs a command in the sandbox's network namespace and returns its
// output.
func (d *daemon) inNetns(t *testing.T, id string, args ...string) string {
	t.Helper()
	full := append([]string{"--net=" + d.netnsPin(id)}, args...)
	out, err := exec.Command("nsenter", full...).CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter %s: %v\n%s", strings.Join(full, " "), err, out)
	}
	return string(out)
}

// ipamAllocations returns host-local's allocations in the test network: IP
// -> sandbox ID.
func (d *daemon) ipamAllocations(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(d.ipamDir, d.network)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range entries {
		if e.Name() == "lock" || strings.HasPrefix(e.Name(), "last_reserved_ip") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // released meanwhile
			}
			t.Fatal(err)
		}
		owner, _, _ := strings.Cut(string(b), "\n")
		out[e.Name()] = strings.TrimSpace(owner)
	}
	return out
}

// requireReachable checks that the host reaches ip over the test bridge: the
// route goes through the bridge, and a TCP connection to a closed port is
// refused by the sandbox's kernel (an answer, not a timeout or "no route").
// No ping: iputils-ping is not installed everywhere.
func (d *daemon) requireReachable(t *testing.T, ip string) {
	t.Helper()
	out, err := exec.Command("ip", "-o", "route", "get", ip).CombinedOutput()
	if err != nil {
		t.Fatalf("ip route get %s: %v\n%s", ip, err, out)
	}
	if !strings.Contains(string(out), "dev "+d.bridge+" ") {
		t.Fatalf("the host's route to %s does not go through the bridge %s: %s", ip, d.bridge, out)
	}
	conn, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "9"), 3*time.Second)
	if err == nil {
		conn.Close()
		t.Fatalf("TCP connect to %s:9 succeeded: something listens in the sandbox?", ip)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("the host cannot reach the sandbox at %s over %s: TCP connect to a closed port gave %v, want connection refused", ip, d.bridge, err)
	}
}
