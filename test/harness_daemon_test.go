package test

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/layout"
)

// Helpers of the daemon under test: its options and configuration, its start,
// stop, kill and restart, and its log. Daemons started by this process are
// tracked, so that none outlives the tests.

// readyTimeout bounds how long a started daemon may take to answer crictl version.
var readyTimeout = testenv.Scaled(15 * time.Second)

// stopTimeout bounds how long a daemon may take to exit after SIGTERM before it
// is killed.
var stopTimeout = testenv.Scaled(15 * time.Second)

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
	secondPath     string           // runtimes.<secondHandler>.path; default: as runc's
	storageDriver  string           // storage_driver; default vfs
	// nodeFiles are written in the node's directory before the daemon starts, by name:
	// registries.conf, registries.conf.d/<name>, policy.json (default: accept anything)
	// and auth.json, which the daemon reads as the node's containers files.
	nodeFiles  map[string]string
	journalDir string // the directory of journal_path (a file system of its own); default root
	// rootFSSize, if not 0, makes root a tmpfs of this many bytes (the journal, the
	// storage and the pulls' temporary files all on it), unmounted by the cleanup.
	rootFSSize int64
	// cdiSpecDirs is cdi_spec_dirs; default <base>/cdi, so that no test reads the
	// machine's /etc/cdi.
	cdiSpecDirs []string
	// oomScoreAdj, if not nil, is the daemon's oom_score_adj, set by a shell that then
	// executes it (as its systemd unit sets -999); default the test process's, which it
	// inherits. Below the test process's it needs CAP_SYS_RESOURCE.
	oomScoreAdj *int
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
	nriSocket  string // nri_listen: the socket NRI plugins of the test connect to
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

	// node is where the daemon keeps things, derived from the configuration the
	// harness writes as the daemon derives it (writeConfig checks that they agree).
	node layout.Node

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
	// Searchable by others (not listable), as a node's /run is: the daemon binds the
	// root filesystems of containers in a user namespace under <run_root>/storage/rootfs
	// and never opens up the directories above its own.
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	d := &daemon{
		opts:       opts,
		base:       base,
		root:       filepath.Join(base, "root"),
		runRoot:    filepath.Join(base, "run"),
		socket:     filepath.Join(base, "crijournal.sock"),
		nriSocket:  filepath.Join(base, "nri.sock"),
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
	if e2eSystemd() {
		// A slice of the node's own; each pod gets one below it (podCgroupParent).
		d.cgroupParent = nodeSlice(base)
	}
	d.node = layout.Node{Root: d.root, RunRoot: d.runRoot, Socket: d.socket, NamespaceDir: d.nsDir, CNIConfDir: d.confDir,
		CNICacheDir: d.cacheDir, RuntimeRoots: map[string]string{"runc": filepath.Join(d.runRoot, "runc")}}
	if opts.journalDir != "" {
		d.node.JournalPath = filepath.Join(opts.journalDir, "journal.db")
	}
	if h := opts.secondHandler; h != "" {
		d.node.RuntimeRoots[h] = d.handlerRoot(h)
	}
	d.ociStateDir = d.node.ConmonState("runc").Dir()
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
	if opts.rootFSSize > 0 {
		if err := unix.Mount("tmpfs", d.root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", opts.rootFSSize)); err != nil {
			t.Fatalf("mount a %d-byte tmpfs on %s: %v", opts.rootFSSize, d.root, err)
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
		}, map[string]any{
			// Host ports (see hostport_test.go); it does nothing for pods without any.
			"type":         "portmap",
			"capabilities": map[string]bool{"portMappings": true},
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
		`stats_collect_period = "1s"`, // writable layers measured soon after a test writes them
		`undo_retry_min = "200ms"`,
		`undo_retry_max = "2s"`,
		`journal_lock_timeout = "5s"`,
		`log_level = "debug"`,
		`log_format = "text"`,
		"cgroup_manager = " + q(e2eCgroupManager()),
		// NRI on (the default), on the daemon's own socket and directories, never
		// the node's /var/run/nri.
		"nri_listen = " + q(d.nriSocket),
		"nri_plugin_dir = " + q(filepath.Join(d.base, "nri", "plugins")),
		"nri_plugin_config_dir = " + q(filepath.Join(d.base, "nri", "conf.d")),
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
	cdiDirs := d.opts.cdiSpecDirs
	if cdiDirs == nil {
		cdiDirs = []string{filepath.Join(d.base, "cdi")}
	}
	quoted := make([]string, len(cdiDirs))
	for i, dir := range cdiDirs {
		quoted[i] = q(dir)
	}
	lines = append(lines, "cdi_spec_dirs = ["+strings.Join(quoted, ", ")+"]")
	lines = append(lines, d.opts.extraTOML...)
	lines = append(lines, "", "[runtimes.runc]", "root = "+q(filepath.Join(d.runRoot, "runc")))
	if d.opts.runtimePath != "" {
		lines = append(lines, "path = "+q(d.opts.runtimePath))
	}
	if h := d.opts.secondHandler; h != "" {
		lines = append(lines, "", "[runtimes."+h+"]", "root = "+q(d.handlerRoot(h)))
		if d.opts.secondPath != "" {
			lines = append(lines, "path = "+q(d.opts.secondPath))
		}
	}
	for _, r := range d.opts.registries {
		lines = append(lines, "", "[[registries]]", "prefix = "+q(r.prefix), "location = "+q(r.location), fmt.Sprintf("insecure = %v", r.insecure))
	}
	writeFile(t, d.configPath, strings.Join(lines, "\n")+"\n", 0o644)
	// The node's paths as the daemon derives them from this file (a test's extraTOML may
	// move some); a file the daemon is to refuse keeps the harness's own.
	if cfg, err := config.Load(d.configPath, nil); err == nil {
		d.node = cfg.Layout()
		d.ociStateDir = d.node.ConmonState("runc").Dir()
	}
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
	if adj := d.opts.oomScoreAdj; adj != nil {
		// The shell's exec keeps its PID: the process is the daemon's.
		cmd = exec.Command("/bin/sh", "-c", `echo "$0" > /proc/self/oom_score_adj && exec "$@"`,
			strconv.Itoa(*adj), bin, "serve", "--config", d.configPath)
	}
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

var metricsAddrRE = regexp.MustCompile(`metrics served.*address=(http://127\.0\.0\.1:[0-9]+/metrics)`)

// metric returns the value of one sample of the daemon's metrics (0 when absent).
func (d *daemon) metric(t *testing.T, sample string) float64 {
	t.Helper()
	logged, _ := os.ReadFile(d.logPath)
	all := metricsAddrRE.FindAllStringSubmatch(string(logged), -1)
	if all == nil {
		t.Fatalf("no metrics address in the daemon's log")
	}
	m := all[len(all)-1] // the daemon's latest start
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatalf("scrape %s: %v", m[1], err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(body), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return 0
}
