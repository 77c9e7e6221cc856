package upgrade

import (
	"bytes"
	"context"
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

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/layout"
	"github.com/crijournal/crijournal/leaks"
)

// The node the two daemons share: its directories, configuration, CNI network and the
// wrappers of the bridge plugin and conmon that the scenarios slow down or fail per pod;
// the daemon's start, stop and kill; its journal and leak report through
// `crijournal inspect`; and the removal of everything at the end.

// cniDir is where Debian installs the reference CNI plugins.
const cniDir = "/usr/lib/cni"

// node is one private node: everything below base, a bridge and a /24 of its own.
type node struct {
	base       string
	configPath string
	logPath    string
	socket     string
	nsDir      string
	ipamDir    string
	conmonDir  string // the conmon wrapper and its files
	podLogDir  string // the pods' log directories
	cgroupPar  string // the pods' cgroup_parent (cgroupfs)
	network    string // CNI network name
	bridge     string
	subnet     string
	layout     layout.Node // the node's paths as the daemon derives them

	mu     sync.Mutex
	proc   *os.Process
	done   chan struct{} // closed once proc has been waited for
	exit   error
	starts int
}

// newNode makes a node and its configuration; no daemon runs yet. t.Cleanup removes
// what is left on it, daemon included.
func newNode(t *testing.T, registry string) *node {
	t.Helper()
	// Not t.TempDir(): the socket path must stay well under 108 bytes. "cju", not the
	// end-to-end harness's "cj" prefix, whose sweep of stale nodes is not ours.
	base, err := os.MkdirTemp("", "cju")
	if err != nil {
		t.Fatal(err)
	}
	// Searchable by others, as a node's /run is: containers in a user namespace reach
	// their root filesystem below it.
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	n := &node{
		base:       base,
		configPath: filepath.Join(base, "crijournal.toml"),
		logPath:    filepath.Join(base, "daemon.log"),
		socket:     filepath.Join(base, "crijournal.sock"),
		nsDir:      filepath.Join(base, "ns"),
		ipamDir:    filepath.Join(base, "ipam"),
		conmonDir:  filepath.Join(base, "conmon"),
		podLogDir:  filepath.Join(base, "pod-logs"),
		cgroupPar:  "/cju-" + filepath.Base(base),
		network:    "cjupgrade",
	}
	n.bridge, n.subnet = freeNetwork(t)
	t.Cleanup(func() { n.cleanup(t) })
	for _, dir := range []string{"root", "run", "ns", "net.d", "plugins", "cni-cache", "ipam", "conmon", "pod-logs", "faults", "cdi"} {
		if err := os.MkdirAll(filepath.Join(base, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(base, "policy.json"), `{"default": [{"type": "insecureAcceptAnything"}]}`, 0o644)
	n.writeCNI(t)
	n.writeConmonWrapper(t)
	n.writeConfig(t, registry)
	t.Logf("node %s: bridge %s, subnet %s", base, n.bridge, n.subnet)
	return n
}

// writeConfig writes the configuration both daemons read: only keys the previous
// release knows (its config/config.go), with short undo retries and a cache that
// outlives the upgrade.
func (n *node) writeConfig(t *testing.T, registry string) {
	t.Helper()
	q := strconv.Quote
	p := func(name string) string { return q(filepath.Join(n.base, name)) }
	lines := []string{
		"# crijournal upgrade test node",
		"root = " + p("root"),
		"run_root = " + p("run"),
		"socket = " + q(n.socket),
		"namespace_dir = " + q(n.nsDir),
		"cni_conf_dir = " + p("net.d"),
		fmt.Sprintf("cni_plugin_dirs = [%s, %s]", p("plugins"), q(cniDir)),
		"cni_cache_dir = " + p("cni-cache"),
		`network_timeout = "5m"`,
		`cache_ttl = "10m"`,
		`cache_sweep_interval = "1s"`,
		`stats_collect_period = "1s"`,
		`undo_retry_min = "200ms"`,
		`undo_retry_max = "2s"`,
		`journal_lock_timeout = "5s"`,
		`log_level = "debug"`,
		`log_format = "text"`,
		`metrics_address = "127.0.0.1:0"`,
		`cgroup_manager = "cgroupfs"`,
		`storage_driver = "vfs"`,
		"conmon_path = " + q(filepath.Join(n.conmonDir, "conmon")),
		"nri_listen = " + p("nri.sock"),
		"nri_plugin_dir = " + p("nri/plugins"),
		"nri_plugin_config_dir = " + p("nri/conf.d"),
		"registries_conf = " + p("registries.conf"),
		"registries_conf_dir = " + p("registries.conf.d"),
		"signature_policy = " + p("policy.json"),
		"global_auth_file = " + p("auth.json"),
		"cdi_spec_dirs = [" + p("cdi") + "]",
		"",
		"[runtimes.runc]",
		"root = " + p("run/runc"),
		"",
		"[[registries]]",
		"prefix = " + q(imagePrefix),
		"location = " + q(registry),
		"insecure = true",
	}
	writeFile(t, n.configPath, strings.Join(lines, "\n")+"\n", 0o644)
	cfg, err := config.Load(n.configPath, nil)
	if err != nil {
		t.Fatalf("the node's configuration: %v", err)
	}
	n.layout = cfg.Layout()
}

// writeCNI writes the network (bridge, host-local) and the wrapper of the bridge plugin,
// first in cni_plugin_dirs. The wrapper logs every call ("<COMMAND> <ID> <pod name>") to
// cni-calls.log and reads the faults of the pod (K8S_POD_NAME of CNI_ARGS) in
// faults/<pod>.<fault>: sleep-<COMMAND> (seconds, before the command), fail-<COMMAND>
// (a CNI error), fail-late-ADD (the real ADD, then a CNI error: an address allocated).
func (n *node) writeCNI(t *testing.T) {
	t.Helper()
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.network,
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": n.bridge, "isGateway": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"ranges":  [][]map[string]string{{{"subnet": n.subnet}}},
				"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
				"dataDir": n.ipamDir,
			},
		}},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(n.base, "net.d", "10-cjupgrade.conflist"), string(b), 0o644)
	script := `#!/bin/bash
# crijournal upgrade test: the bridge plugin, slowed or failed per pod.
dir=` + shellQuote(n.base) + `
pod=
IFS=';' read -ra args <<< "${CNI_ARGS:-}"
for a in "${args[@]}"; do
	case "$a" in K8S_POD_NAME=*) pod="${a#K8S_POD_NAME=}" ;; esac
done
echo "${CNI_COMMAND} ${CNI_CONTAINERID:-} ${pod}" >> "$dir/cni-calls.log"
f="$dir/faults/${pod:-none}"
if [ -f "$f.sleep-${CNI_COMMAND}" ]; then
	sleep "$(cat "$f.sleep-${CNI_COMMAND}")"
fi
if [ -e "$f.fail-${CNI_COMMAND}" ]; then
	echo '{"cniVersion":"1.0.0","code":11,"msg":"injected failure"}'
	exit 1
fi
if [ "${CNI_COMMAND}" = ADD ] && [ -e "$f.fail-late-ADD" ]; then
	` + cniDir + `/bridge "$@" >/dev/null
	echo '{"cniVersion":"1.0.0","code":11,"msg":"injected failure after the ADD allocated"}'
	exit 1
fi
exec ` + cniDir + `/bridge "$@"
`
	writeFile(t, filepath.Join(n.base, "plugins", "bridge"), script, 0o755)
}

// fault switches a fault of the bridge plugin for one pod on (content: a sleep's seconds,
// or empty) or off (on false).
func (n *node) fault(t *testing.T, pod, fault string, on bool, content string) {
	t.Helper()
	path := filepath.Join(n.base, "faults", pod+"."+fault)
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, content, 0o644)
}

// cniCalls returns the IDs the bridge plugin got command for, for pods named pod, oldest
// first.
func (n *node) cniCalls(t *testing.T, command, pod string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.base, "cni-calls.log"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 3 && f[0] == command && f[2] == pod {
			ids = append(ids, f[1])
		}
	}
	return ids
}

// writeConmonWrapper installs conmon's wrapper: it sleeps the seconds in conmon-sleep
// beside it, if there, then runs the real conmon; `conmon --version` is neither slowed
// nor counted. Each start is logged in conmon-calls.log.
func (n *node) writeConmonWrapper(t *testing.T) {
	t.Helper()
	conmon, err := exec.LookPath("conmon")
	if err != nil {
		testenv.Need(t, "the upgrade test needs conmon in PATH (make deps)")
	}
	script := `#!/bin/bash
if [ "$*" = --version ]; then
	exec ` + shellQuote(conmon) + ` --version
fi
dir=` + shellQuote(n.conmonDir) + `
echo "$*" >> "$dir/conmon-calls.log"
if [ -f "$dir/conmon-sleep" ]; then
	sleep "$(cat "$dir/conmon-sleep")"
fi
exec ` + shellQuote(conmon) + ` "$@"
`
	writeFile(t, filepath.Join(n.conmonDir, "conmon"), script, 0o755)
}

// slowConmon makes later conmon starts sleep d first; 0 makes them fast again.
func (n *node) slowConmon(t *testing.T, d time.Duration) {
	t.Helper()
	path := filepath.Join(n.conmonDir, "conmon-sleep")
	if d <= 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, strconv.FormatFloat(d.Seconds(), 'f', 3, 64), 0o644)
}

// conmonStarts counts the wrapper's starts of conmon.
func (n *node) conmonStarts(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.conmonDir, "conmon-calls.log"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

// start starts bin as the node's daemon and waits until it answers crictl version.
func (n *node) start(t *testing.T, bin string) {
	t.Helper()
	n.mu.Lock()
	if n.proc != nil {
		n.mu.Unlock()
		t.Fatal("start: a daemon runs already")
	}
	logf, err := os.OpenFile(n.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		n.mu.Unlock()
		t.Fatal(err)
	}
	defer logf.Close()
	n.starts++
	fmt.Fprintf(logf, "=== upgrade test: start %d of %s at %s ===\n", n.starts, bin, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(bin, "serve", "--config", n.configPath)
	cmd.Env = cleanEnv()
	cmd.Dir = n.base
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	n.proc, n.done = cmd.Process, done
	n.mu.Unlock()
	go func() {
		err := cmd.Wait()
		n.mu.Lock()
		n.exit = err
		n.mu.Unlock()
		close(done)
	}()
	t.Logf("daemon %s started (pid %d)", bin, cmd.Process.Pid)

	start := time.Now()
	err = testenv.Poll(testenv.Scaled(30*time.Second), 100*time.Millisecond, func() error {
		select {
		case <-done:
			return fmt.Errorf("it exited (%v)", n.exitErr())
		default:
		}
		out, stderr, err := n.crictlWithin(2*time.Second, "version")
		if err != nil || !strings.Contains(out, "RuntimeName") {
			return fmt.Errorf("crictl version: %v: %s", err, strings.TrimSpace(stderr))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("daemon %s not ready: %v; log:\n%s", bin, err, n.logTail(80))
	}
	t.Logf("daemon ready after %v", time.Since(start).Round(time.Millisecond))
}

func (n *node) exitErr() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.exit
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// stop ends the daemon with sig (SIGTERM: it must exit within a minute, else it is
// killed and the test fails; SIGKILL: at once) and returns how long it took.
func (n *node) stop(t *testing.T, sig syscall.Signal) time.Duration {
	t.Helper()
	n.mu.Lock()
	p, done := n.proc, n.done
	n.mu.Unlock()
	if p == nil {
		return 0
	}
	start := time.Now()
	_ = p.Signal(sig)
	select {
	case <-done:
	case <-time.After(testenv.Scaled(time.Minute)):
		_ = p.Kill()
		<-done
		t.Errorf("the daemon (pid %d) was still running a minute after %v: killed", p.Pid, sig)
	}
	took := time.Since(start)
	n.mu.Lock()
	n.proc = nil
	n.mu.Unlock()
	t.Logf("daemon (pid %d) ended by %v after %v: %v", p.Pid, sig, took.Round(time.Millisecond), n.exitErr())
	return took
}

// logTail returns the last lines of the daemons' log.
func (n *node) logTail(lines int) string {
	b, err := os.ReadFile(n.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// inspect runs `bin inspect <args> --config <node>` and decodes its JSON output into v;
// it returns the command's error (inspect --leaks exits non-zero on a leak).
func (n *node) inspect(t *testing.T, bin string, v any, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Scaled(30*time.Second))
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append(append([]string{"inspect"}, args...), "--config", n.configPath)...)
	cmd.Env = cleanEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if jerr := json.Unmarshal(stdout.Bytes(), v); jerr != nil {
		t.Fatalf("%s inspect %s: %v (%v)\nstdout: %s\nstderr: %s", bin, strings.Join(args, " "), err, jerr, stdout.Bytes(), stderr.Bytes())
	}
	return err
}

// records returns the journal's records as bin's `inspect --json` reads them (from the
// daemon, or from the file when none runs).
func (n *node) records(t *testing.T, bin string) []journal.Record {
	t.Helper()
	var recs []journal.Record
	if err := n.inspect(t, bin, &recs, "--json"); err != nil {
		t.Fatalf("%s inspect --json: %v", bin, err)
	}
	return recs
}

// record returns the record of id, if the journal holds one.
func (n *node) record(t *testing.T, bin, id string) (journal.Record, bool) {
	t.Helper()
	for _, r := range n.records(t, bin) {
		if r.ID == id {
			return r, true
		}
	}
	return journal.Record{}, false
}

// leaks returns what bin's `inspect --leaks` finds on the node that no record owns (with
// the daemon down, records of work left half done too), one a line, and how many things
// it found that records own.
func (n *node) leaks(t *testing.T, bin string) (leaked []string, held int) {
	t.Helper()
	var rep leaks.Report
	err := n.inspect(t, bin, &rep, "--leaks", "--json", "--cgroup-parent", n.cgroupPar)
	for _, it := range rep.Leaks {
		leaked = append(leaked, it.String())
	}
	if (err != nil) != (len(leaked) > 0) {
		t.Errorf("inspect --leaks exited with %v, reporting %d leak(s)", err, len(leaked))
	}
	return leaked, len(rep.Held)
}

// ipAllocations returns host-local's allocations: IP -> sandbox ID.
func (n *node) ipAllocations(t *testing.T) map[string]string {
	t.Helper()
	dir := filepath.Join(n.ipamDir, n.network)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
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
			continue
		}
		out[e.Name()] = strings.Fields(string(b) + " ?")[0]
	}
	return out
}

// cleanup removes what the test left on the node: the pods (through the daemon, if one
// runs), then the daemon, the containers and conmons, pause processes, cgroups, mounts,
// the bridge and the directories.
func (n *node) cleanup(t *testing.T) {
	if n.running() {
		if out, _, err := n.crictlWithin(10*time.Second, "pods", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				_, _, _ = n.crictlWithin(30*time.Second, "stopp", id)
				_, _, _ = n.crictlWithin(30*time.Second, "rmp", "-f", id)
			}
		}
		n.stop(t, syscall.SIGTERM)
	}
	if t.Failed() {
		t.Logf("daemon log %s (last 200 lines):\n%s", n.logPath, n.logTail(200))
	}
	for _, p := range leaks.Conmons(n.layout.ConmonState("runc").Dir()) {
		t.Logf("cleanup: killing conmon %d", p.PID)
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	if runc := runcPath(); runc != "" {
		root := n.layout.RuntimeRoot("runc")
		out, _ := exec.Command(runc, "--root", root, "list", "-q").Output()
		for _, id := range strings.Fields(string(out)) {
			out, err := exec.Command(runc, "--root", root, "delete", "--force", id).CombinedOutput()
			t.Logf("cleanup: runc delete --force %s: %v %s", id, err, out)
		}
	}
	entries, _ := os.ReadDir(filepath.Join(n.nsDir, "pidns"))
	for _, e := range entries {
		for _, pid := range pauseProcesses(e.Name()) {
			t.Logf("cleanup: killing pause process %d of %s", pid, e.Name())
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	removeCgroups(n.cgroupPar)
	if dir := n.layout.ConmonState("runc").Dir(); strings.HasPrefix(dir, layout.ShortStateDirPrefix) {
		_ = os.RemoveAll(dir)
	}
	mounts, _ := testenv.MountsBelow(n.base)
	for _, m := range mounts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Logf("cleanup: unmount %s: %v", m, err)
		}
	}
	if _, err := net.InterfaceByName(n.bridge); err == nil {
		if out, err := exec.Command("ip", "link", "del", n.bridge).CombinedOutput(); err != nil {
			t.Logf("cleanup: ip link del %s: %v: %s", n.bridge, err, out)
		}
	}
	if err := os.RemoveAll(n.base); err != nil {
		t.Logf("cleanup: %v", err)
	}
}

// pauseProcesses lists the live pause processes of a sandbox: "<binary> pause <id>".
func pauseProcesses(id string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(args) == 3 && args[1] == "pause" && args[2] == id && testenv.Alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// removeCgroups removes the cgroup parent's directories in every cgroup hierarchy,
// deepest first.
func removeCgroups(parent string) {
	b, _ := os.ReadFile("/proc/self/mounts")
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 3 || (f[2] != "cgroup" && f[2] != "cgroup2") {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(f[1], parent), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			for range 50 { // a cgroup whose last process is exiting is busy for a moment
				if err := unix.Rmdir(dirs[i]); err == nil || errors.Is(err, unix.ENOENT) {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
}

// runcPath is the runc the daemons run (runtimes.runc.path unset): the project's when
// make deps installed it, else runc in PATH; "" if neither.
func runcPath() string {
	if p := (config.Config{}).RuntimePath("runc"); p != "" {
		return p
	}
	p, _ := exec.LookPath("runc")
	return p
}

// freeNetwork picks a bridge name and a 10.x.y.0/24 that no interface or route of the
// host uses.
func freeNetwork(t *testing.T) (bridge, subnet string) {
	t.Helper()
	for range 50 {
		r := testenv.RandomHex(t, 2)
		a, _ := strconv.ParseUint(r[:2], 16, 8)
		b, _ := strconv.ParseUint(r[2:], 16, 8)
		cidr := fmt.Sprintf("10.%d.%d.0/24", 220+a%30, b)
		out, err := exec.Command("ip", "-o", "addr", "show", "to", cidr).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			continue
		}
		out, err = exec.Command("ip", "-o", "route", "show", "root", cidr).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			continue
		}
		name := "cju" + testenv.RandomHex(t, 3)
		if _, err := net.InterfaceByName(name); err == nil {
			continue
		}
		return name, cidr
	}
	t.Fatal("no free bridge name and subnet in 50 tries")
	return "", ""
}

// cleanEnv is this process's environment without CRIJOURNAL_* variables (make sets
// CRIJOURNAL_BIN and CRIJOURNAL_PREV_BIN; no failure point is armed).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CRIJOURNAL_") {
			env = append(env, kv)
		}
	}
	return env
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
