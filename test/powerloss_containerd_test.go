package test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// The anchor of make test-powerloss: containerd 2.x (make bench-deps builds 2.4.2) under
// the same workload and cuts, its root on the same disk, measured by the same checks
// where they apply (a failed start, a lost image, a static pod not back, an IP address or
// a snapshot that nothing owns). containerd keeps no creation for a retry, so the checks of
// cached creations do not apply to it.

// plPauseImage is the sandbox image containerd runs for each pod: busybox sleeping, from
// this boot's registry (crijournal needs none).
const plPauseImage = "registry.k8s.io/pause:3.10"

// plContainerd is containerd on the power-cut node: its root on the disk, its state and
// socket on /run.
type plContainerd struct {
	bin        string // the directory of containerd, its shim and ctr
	root       string // on the disk
	state      string // on /run
	configPath string
	hostsDir   string // config_path of the registry mirrors (hosts.toml)
	logPath    string

	proc *os.Process
	done chan struct{}
}

// setUpContainerd points the boot's daemon handle (its socket, for crictl) at containerd
// and writes containerd's configuration.
func (pl *powerLoss) setUpContainerd(t *testing.T) {
	t.Helper()
	bin := os.Getenv("CRIJOURNAL_POWERLOSS_CONTAINERD")
	if _, err := os.Stat(filepath.Join(bin, "containerd")); err != nil {
		t.Fatalf("CRIJOURNAL_POWERLOSS_CONTAINERD=%q holds no containerd (make bench-deps builds it): %v", bin, err)
	}
	c := &plContainerd{
		bin:        bin,
		root:       filepath.Join(pl.dir, "containerd"),
		state:      "/run/containerd-pl",
		configPath: "/run/containerd-pl.toml",
		hostsDir:   "/run/containerd-pl-hosts",
		logPath:    filepath.Join(pl.logs, "containerd.log"),
	}
	pl.d.socket = filepath.Join(c.state, "containerd.sock")
	pl.k.writeConfig(t) // its endpoint is containerd's

	// The sandbox image: busybox sleeping as PID 1.
	img := storagetest.BusyboxImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Entrypoint = []string{"sleep", "2147483647"}
	cf.Config.Cmd = nil
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(pl.registry+"/pause:3.10", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push the pause image: %v", err)
	}

	hosts := fmt.Sprintf("server = \"http://%[1]s\"\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n", pl.registry)
	if err := os.MkdirAll(filepath.Join(c.hostsDir, testImagePrefix), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(c.hostsDir, testImagePrefix, "hosts.toml"), hosts, 0o644)
	q := func(s string) string { return fmt.Sprintf("%q", s) }
	config := strings.Join([]string{
		"version = 3",
		"root = " + q(c.root),
		"state = " + q(c.state),
		`disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]`,
		"[grpc]", "  address = " + q(pl.d.socket),
		"[ttrpc]", "  address = " + q(pl.d.socket+".ttrpc"),
		"[debug]", `  level = "info"`,
		"[metrics]", `  address = ""`,
		`[plugins."io.containerd.internal.v1.opt"]`, "  path = " + q(filepath.Join(c.root, "opt")),
		`[plugins."io.containerd.nri.v1.nri"]`, "  socket_path = " + q(filepath.Join(c.state, "nri.sock")),
		`[plugins."io.containerd.cri.v1.images"]`, `  snapshotter = "overlayfs"`,
		`  [plugins."io.containerd.cri.v1.images".pinned_images]`, "    sandbox = " + q(plPauseImage),
		`  [plugins."io.containerd.cri.v1.images".registry]`, "    config_path = " + q(c.hostsDir),
		`[plugins."io.containerd.cri.v1.runtime"]`,
		"  restrict_oom_score_adj = true",
		`  [plugins."io.containerd.cri.v1.runtime".containerd]`, `    default_runtime_name = "runc"`,
		`    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]`,
		`      runtime_type = "io.containerd.runc.v2"`, `      snapshotter = "overlayfs"`,
		`      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]`,
		"        BinaryName = " + q(plRunc()), "        Root = " + q(filepath.Join(c.state, "runc")), "        SystemdCgroup = false",
		`  [plugins."io.containerd.cri.v1.runtime".cni]`,
		fmt.Sprintf("    bin_dirs = [%s, %s]", q(pl.d.pluginDir), q(cniDir)), "    conf_dir = " + q(pl.d.confDir), "    max_conf_num = 1",
		`[plugins."io.containerd.grpc.v1.cri"]`, `  stream_server_address = "127.0.0.1"`, `  stream_server_port = "0"`,
	}, "\n") + "\n"
	writeFile(t, c.configPath, config, 0o644)
	pl.ctd = c
}

// plRunc is the runc both runtimes run: the project's (make deps), else the one in PATH.
func plRunc() string {
	const bundled = "/usr/local/libexec/crijournal/runc"
	if _, err := os.Stat(bundled); err == nil {
		return bundled
	}
	p, _ := exec.LookPath("runc")
	return p
}

// start starts containerd and waits until it answers crictl; one that does not is a
// failed start, and the end of this boot's checks.
func (c *plContainerd) start(t *testing.T, pl *powerLoss) {
	t.Helper()
	logf, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(c.bin, "containerd"), "--config", c.configPath)
	cmd.Env = append(daemonEnv(nil), "PATH="+c.bin+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start containerd: %v", err)
	}
	c.proc, c.done = cmd.Process, make(chan struct{})
	go func() { _ = cmd.Wait(); close(c.done) }()
	start := time.Now()
	for deadline := start.Add(readyTimeout); ; time.Sleep(200 * time.Millisecond) {
		select {
		case <-c.done:
			pl.finding(t, findFailedStart, "containerd exited at its start; log:\n%s", tailFile(c.logPath, 40))
			t.FailNow()
		default:
		}
		if _, _, err := pl.d.crictlTimeout(10*time.Second, "version"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			pl.finding(t, findFailedStart, "containerd did not answer within %v; log:\n%s", readyTimeout, tailFile(c.logPath, 40))
			t.FailNow()
		}
	}
	t.Logf("verify: containerd ready %v after its start", time.Since(start).Round(time.Millisecond))
}

// stop stops containerd (SIGTERM, then SIGKILL after a minute).
func (c *plContainerd) stop(t *testing.T) {
	t.Helper()
	if c.proc == nil {
		return
	}
	_ = c.proc.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(4 * readyTimeout):
		_ = c.proc.Kill()
		<-c.done
	}
	c.proc = nil
}

// checkLeaks gives containerd's own recovery a moment, then counts what nothing owns:
// host-local IP files of sandboxes containerd does not list, and active snapshots of
// containers it does not hold.
func (c *plContainerd) checkLeaks(t *testing.T, pl *powerLoss) {
	t.Helper()
	time.Sleep(readyTimeout / 3)
	d := pl.d
	sandboxes := map[string]bool{}
	out, _, err := d.crictl(t, "pods", "-q")
	if err != nil {
		pl.finding(t, findFailedStart, "crictl pods: %v", err)
		return
	}
	for _, id := range strings.Fields(out) {
		sandboxes[id] = true
	}
	for ip, owner := range d.ipamAllocations(t) {
		if !sandboxes[owner] {
			pl.finding(t, findLeak, "host-local holds %s for %s, which containerd does not list", ip, owner)
		}
	}
	ctr := func(args ...string) string {
		cmd := exec.Command(filepath.Join(c.bin, "ctr"), append([]string{"-a", d.socket, "-n", "k8s.io"}, args...)...)
		b, err := cmd.Output()
		if err != nil {
			t.Logf("ctr %v: %v", args, err)
		}
		return string(b)
	}
	containers := map[string]bool{}
	for _, id := range strings.Fields(ctr("containers", "ls", "-q")) {
		containers[id] = true
	}
	for _, line := range strings.Split(ctr("snapshots", "ls"), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "Active" && !containers[f[0]] {
			pl.finding(t, findLeak, "active snapshot %s of no container", f[0])
		}
	}
}

// finalContainerd ends the anchor's last boot: the static pods go, the kubelet and
// containerd stop, and what is left is counted.
func (pl *powerLoss) finalContainerd(t *testing.T) {
	t.Helper()
	d, k := pl.d, pl.k
	for _, name := range pl.staticPods(t) {
		k.removeStaticPod(t, name)
	}
	time.Sleep(readyTimeout)
	k.stop(t)
	for _, id := range d.pods(t) {
		_, _, _ = d.crictl(t, "stopp", id)
		_, _, _ = d.crictl(t, "rmp", id)
	}
	pl.ctd.checkLeaks(t, pl)
	pl.ctd.stop(t)
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
