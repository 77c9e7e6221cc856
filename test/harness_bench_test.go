package test

import (
	"context"
	"fmt"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/layout"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// Helpers of the benchmarks: a node (daemon, registry, pulled image) sized by
// the CRIJOURNAL_BENCH_* variables, and containers started on it.

func benchContainers(b *testing.B) int { return envCount(b, "CRIJOURNAL_BENCH_CONTAINERS", 100) }

// benchNode is a daemon of its own for benchmarks, driven over gRPC: the test
// harness's daemon is built for *testing.T.
type benchNode struct {
	base, socket, cgroupParent string
	pid                        int // the daemon's
	rt                         runtimeapi.RuntimeServiceClient
	img                        runtimeapi.ImageServiceClient
	podID                      string
	pod                        *runtimeapi.PodSandboxConfig
}

// startBenchNode starts a registry with the test image and a daemon pulling
// from it; b.Cleanup removes every container and pod, stops the daemon and
// removes its directories.
func startBenchNode(b *testing.B) *benchNode {
	b.Helper()
	if msg := checkPrereqs(); msg != "" {
		b.Skip(msg)
	}
	for _, tool := range []string{"runc", "conmon"} {
		if _, err := exec.LookPath(tool); err != nil {
			b.Skipf("the benchmark needs %s in PATH", tool)
		}
	}
	storagetest.RequireBusybox(b)
	host := storagetest.StartRegistry(b)
	storagetest.PushBusybox(b, host, testImageRepo, testImageTag)
	bin, err := findOrBuildDaemon()
	if err != nil {
		b.Fatal(err)
	}

	base, err := os.MkdirTemp("", "cj")
	if err != nil {
		b.Fatal(err)
	}
	// The cgroup parent is named like the harness's, which removeNodeContainers
	// removes from every hierarchy.
	n := &benchNode{base: base, socket: filepath.Join(base, "crijournal.sock"), cgroupParent: "/cje2e-" + filepath.Base(base)}
	b.Cleanup(func() { os.RemoveAll(base) })
	for _, dir := range []string{"root", "run", "ns", "net.d", "logs"} {
		if err := os.MkdirAll(filepath.Join(base, dir), 0o755); err != nil {
			b.Fatal(err)
		}
	}
	q := strconv.Quote
	conf := strings.Join([]string{
		"root = " + q(filepath.Join(base, "root")),
		"run_root = " + q(filepath.Join(base, "run")),
		"socket = " + q(n.socket),
		"namespace_dir = " + q(filepath.Join(base, "ns")),
		"cni_conf_dir = " + q(filepath.Join(base, "net.d")),
		`storage_driver = "overlay"`,
		"log_level = " + q(benchLogLevel()),
		// NRI as configured by CRIJOURNAL_BENCH_NRI (default on), in the node's own
		// directory, never the machine's /var/run/nri.
		"enable_nri = " + strconv.FormatBool(os.Getenv("CRIJOURNAL_BENCH_NRI") != "false"),
		"nri_listen = " + q(filepath.Join(base, "nri.sock")),
		"nri_plugin_dir = " + q(filepath.Join(base, "nri", "plugins")),
		"nri_plugin_config_dir = " + q(filepath.Join(base, "nri", "conf.d")),
		// The node's containers files are the benchmark's own, never /etc/containers.
		"registries_conf = " + q(filepath.Join(base, "registries.conf")),
		"registries_conf_dir = " + q(filepath.Join(base, "registries.conf.d")),
		"signature_policy = " + q(filepath.Join(base, "policy.json")),
		"global_auth_file = " + q(filepath.Join(base, "auth.json")),
		"", "[runtimes.runc]", "root = " + q(filepath.Join(base, "run", "runc")),
		"", "[[registries]]", "prefix = " + q(testImagePrefix), "location = " + q(host), "insecure = true",
	}, "\n") + "\n"
	// CRIJOURNAL_BENCH_CONFIG adds top-level lines to the daemon's configuration, such as
	// 'pprof_address = "127.0.0.1:6060"' to profile it, or a setting to measure it.
	if extra := os.Getenv("CRIJOURNAL_BENCH_CONFIG"); extra != "" {
		conf = extra + "\n" + conf
	}
	if err := os.WriteFile(filepath.Join(base, "policy.json"), []byte(permissivePolicy), 0o600); err != nil {
		b.Fatal(err)
	}
	confPath := filepath.Join(base, "crijournal.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		b.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(base, "daemon.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "serve", "--config", confPath)
	cmd.Env = daemonEnv(nil)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	trackDaemon(cmd.Process)
	n.pid = cmd.Process.Pid
	b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		untrackDaemon(cmd.Process)
		// What a failed run left: containers, then mounts (the overlay root
		// filesystems), deepest first.
		stateDir := layout.StateDirFor(filepath.Join(base, "run"), "runc")
		removeNodeContainers(b.Logf, filepath.Join(base, "run", "runc"), stateDir, n.cgroupParent)
		for _, m := range mountsBelow(base) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		// conmon's state directory is under /run when the run root is long.
		if err := os.RemoveAll(stateDir); err != nil {
			b.Errorf("remove conmon's state directory: %v", err)
		}
	})

	conn, err := grpc.NewClient("unix://"+n.socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	n.rt, n.img = runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn)
	testenv.Eventually(b, readyTimeout, 100*time.Millisecond, func() error {
		if _, err := n.rt.Version(b.Context(), &runtimeapi.VersionRequest{}); err != nil {
			return fmt.Errorf("daemon not ready within %v: %v", readyTimeout, err)
		}
		return nil
	})
	if _, err := n.img.PullImage(b.Context(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: testImage}}); err != nil {
		b.Fatal(err)
	}
	n.pod = &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "bench", Namespace: "bench", Uid: filepath.Base(base)},
		LogDirectory: filepath.Join(base, "logs"),
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: n.cgroupParent, SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	resp, err := n.rt.RunPodSandbox(b.Context(), &runtimeapi.RunPodSandboxRequest{Config: n.pod})
	if err != nil {
		b.Fatal(err)
	}
	n.podID = resp.GetPodSandboxId()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if _, err := n.rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: n.podID}); err != nil {
			b.Errorf("stop the benchmark pod: %v", err)
		}
		if _, err := n.rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: n.podID}); err != nil {
			b.Errorf("remove the benchmark pod: %v", err)
		}
	})
	return n
}

// benchLogLevel is the benchmark daemon's log level: warn, or CRIJOURNAL_BENCH_LOG_LEVEL.
func benchLogLevel() string {
	if v := os.Getenv("CRIJOURNAL_BENCH_LOG_LEVEL"); v != "" {
		return v
	}
	return "warn"
}

// runContainers creates and starts count sleeping containers in the node's
// pod, four at a time, and returns their IDs; b.Cleanup removes them.
func (n *benchNode) runContainers(b *testing.B, count int) []string {
	b.Helper()
	ids := make([]string, count)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for _, id := range ids {
			if id == "" {
				continue
			}
			if _, err := n.rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
				b.Errorf("remove benchmark container %s: %v", id, err)
			}
		}
	})
	fourAtATime(b, count, "container", func(i int) error {
		cfg := &runtimeapi.ContainerConfig{
			Metadata: &runtimeapi.ContainerMetadata{Name: fmt.Sprintf("c%d", i)},
			Image:    &runtimeapi.ImageSpec{Image: testImage},
			Command:  []string{"sleep", "3600"},
			LogPath:  fmt.Sprintf("c%d.log", i),
			Labels:   map[string]string{"bench": "stats"},
		}
		resp, err := n.rt.CreateContainer(b.Context(), &runtimeapi.CreateContainerRequest{PodSandboxId: n.podID, Config: cfg, SandboxConfig: n.pod})
		if err != nil {
			return err
		}
		ids[i] = resp.GetContainerId()
		_, err = n.rt.StartContainer(b.Context(), &runtimeapi.StartContainerRequest{ContainerId: ids[i]})
		return err
	})
	return ids
}

// fourAtATime calls do for each i below count, four at a time, and fails b with
// the first error, named after what (a "pod", a "container") and i; it logs how
// long the count of them took.
func fourAtATime(b *testing.B, count int, what string, do func(i int) error) {
	b.Helper()
	errs := make([]error, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	start := time.Now()
	for i := range count {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = do(i)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			b.Fatalf("%s %d: %v", what, i, err)
		}
	}
	b.Logf("%d %ss running after %v", count, what, time.Since(start).Round(time.Millisecond))
}

func envCount(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}
