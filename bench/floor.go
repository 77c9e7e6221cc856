package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/netns"
)

// FloorOptions describe the floor: what runc and the CNI plugin cost by themselves on
// this machine, measured directly, without any CRI runtime.
type FloorOptions struct {
	Runs        int    // how many pods' worth of work (default 10)
	Concurrency int    // runs at a time (default 1), as a workload's pods at a time
	Runc        string // the OCI runtime binary (default runc from PATH)
	// Command is the container's (default sleep 3600); its root file system is a
	// directory with the static busybox of the host (Busybox, default busybox from PATH).
	Command []string
	Busybox string
	// CNIPluginDirs are searched for the plugins (default /opt/cni/bin, /usr/lib/cni).
	CNIPluginDirs []string
	// CNIConfList is the network (a conflist); by default, the bridge plugin with
	// host-local on a bridge (Bridge, default cjfloor0) and subnet (Subnet, default
	// 10.253.0.0/24) of the floor's own, which it removes afterwards.
	CNIConfList    []byte
	Bridge, Subnet string
}

// Floor operations.
const (
	OpRuncCreate Op = "runc create"
	OpRuncStart  Op = "runc start"
	OpRuncDelete Op = "runc delete -f"
	OpRuncKill   Op = "runc kill + exit"
	OpRuncRemove Op = "runc delete (stopped)"
	OpCNIAdd     Op = "CNI ADD"
	OpCNIDel     Op = "CNI DEL"
)

// FloorReport is what the floor measured. Ops holds runc create and start of a busybox
// bundle, the CNI ADD and DEL of a fresh network namespace, and the container's end, one
// of two ways in turn: runc delete -f (which polls for the container's exit every 100
// ms), or runc kill KILL, the exit seen on a pidfd, and runc delete of the stopped
// container; and per run the sums: PodUp (ADD + create + start, what a one-container
// pod's start needs at least) and PodDown (DEL + kill + exit + delete, the cheaper way).
type FloorReport struct {
	Runs int          `json:"runs"`
	Ops  map[Op]Stats `json:"ops"`
}

// FloorSteps are the floor's operations, in the order reports print them.
var FloorSteps = []Op{OpCNIAdd, OpRuncCreate, OpRuncStart, OpPodUp, OpCNIDel, OpRuncDelete, OpRuncKill, OpRuncRemove, OpPodDown}

// Floor measures the floor: o.Runs times, in a fresh network namespace, the CNI ADD, runc
// create and runc start of a container that joins it, then the CNI DEL and the
// container's end (runc delete -f in every second run, runc kill, exit and delete in
// the others). Each step runs alone, so the figures are each one's own cost. It removes what it
// made (bundle, containers, namespaces, the default network's bridge).
func Floor(ctx context.Context, o FloorOptions) (_ *FloorReport, err error) {
	if o.Runs <= 0 {
		o.Runs = 10
	}
	if o.Runc == "" {
		o.Runc = "runc"
	}
	if len(o.Command) == 0 {
		o.Command = []string{"sleep", "3600"}
	}
	if o.Busybox == "" {
		o.Busybox = "busybox"
	}
	if len(o.CNIPluginDirs) == 0 {
		o.CNIPluginDirs = []string{"/opt/cni/bin", "/usr/lib/cni"}
	}
	if o.Bridge == "" {
		o.Bridge = "cjfloor0"
	}
	if o.Subnet == "" {
		o.Subnet = "10.253.0.0/24"
	}
	o.Concurrency = max(o.Concurrency, 1)
	runc, err := exec.LookPath(o.Runc)
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	// Under /run, so that the runc root and namespace pins are on a tmpfs like a
	// runtime's.
	dir, err := os.MkdirTemp("/run", "cjfloor-")
	if err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	defer func() {
		if rerr := os.RemoveAll(dir); rerr != nil {
			err = errors.Join(err, fmt.Errorf("floor: %w", rerr))
		}
	}()
	bundle := filepath.Join(dir, "bundle")
	if err := makeBusyboxBundle(ctx, runc, o.Busybox, bundle); err != nil {
		return nil, fmt.Errorf("floor: %w", err)
	}
	conf := o.CNIConfList
	if conf == nil {
		conf = []byte(fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "cj-floor", "plugins": [{"type": "bridge", "bridge": %q,
 "isGateway": true, "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "dataDir": %q}}]}`,
			o.Bridge, o.Subnet, filepath.Join(dir, "ipam")))
		defer func() {
			if l, lerr := netlink.LinkByName(o.Bridge); lerr == nil {
				if lerr := netlink.LinkDel(l); lerr != nil {
					err = errors.Join(err, fmt.Errorf("floor: remove bridge %s: %w", o.Bridge, lerr))
				}
			}
		}()
	}
	list, err := libcni.ConfListFromBytes(conf)
	if err != nil {
		return nil, fmt.Errorf("floor: network: %w", err)
	}
	root := filepath.Join(dir, "runc")
	rep := &Report{samples: map[Op][]time.Duration{}}
	work := make(chan int)
	errs := make([]error, o.Runs)
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One per worker: a CNIConfig sets itself up on first use, unguarded.
			cni := libcni.NewCNIConfigWithCacheDir(o.CNIPluginDirs, filepath.Join(dir, "cni-cache"), nil)
			for i := range work {
				id := fmt.Sprintf("cjfloor-%d-%d", os.Getpid(), i)
				if err := floorRun(ctx, o, runc, root, bundle, dir, id, i%2 == 1, cni, list, rep); err != nil {
					errs[i] = fmt.Errorf("floor: run %d: %w", i+1, err)
				}
			}
		}()
	}
	for i := range o.Runs {
		work <- i
	}
	close(work)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	rep.finish()
	return &FloorReport{Runs: o.Runs, Ops: rep.Ops}, nil
}

// floorRun is one run of Floor, as container id, with its own network namespace; with
// force, the container ends with runc delete -f.
func floorRun(ctx context.Context, o FloorOptions, runc, root, bundle, dir, id string, force bool, cni *libcni.CNIConfig, list *libcni.NetworkConfigList, rep *Report) (err error) {
	pins, err := netns.Pin(ctx, filepath.Join(dir, "ns"), id, []netns.Kind{netns.Net}, "")
	if err != nil {
		return err
	}
	nsPath := pins[netns.Net]
	cleanCtx := context.WithoutCancel(ctx)
	defer func() {
		if uerr := netns.Unpin(cleanCtx, nsPath); uerr != nil {
			err = errors.Join(err, uerr)
		}
	}()
	// A bundle per run (runs may be concurrent), sharing the read-only root file system.
	template := bundle
	bundle = filepath.Join(dir, "bundles", id)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return err
	}
	if err := writeBundleConfig(template, bundle, o.Command, nsPath); err != nil {
		return err
	}
	logPath := filepath.Join(bundle, "runc.log")
	rtConf := &libcni.RuntimeConf{ContainerID: id, NetNS: nsPath, IfName: "eth0"}
	runcCmd := func(args ...string) error {
		cmd := exec.CommandContext(ctx, runc, append([]string{"--root", root, "--log", logPath}, args...)...)
		cmd.Dir = bundle
		// The container inherits runc's stdio: a pipe would keep Wait waiting for as
		// long as the container runs. Its streams are /dev/null, runc's messages go to
		// its log file.
		if err := cmd.Run(); err != nil {
			msg, _ := os.ReadFile(logPath)
			return fmt.Errorf("runc %s: %w: %s", args[0], err, lastLine(msg))
		}
		return nil
	}
	added, created := false, false
	defer func() {
		if created && err != nil {
			_ = runcCmd("delete", "-f", id)
		}
		if added && err != nil {
			_ = cni.DelNetworkList(cleanCtx, list, rtConf)
		}
	}()
	timed := func(op Op, f func() error) (time.Duration, error) {
		t := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		d := time.Since(t)
		rep.add(op, d)
		return d, nil
	}
	add, err := timed(OpCNIAdd, func() error { _, err := cni.AddNetworkList(ctx, list, rtConf); return err })
	if err != nil {
		return err
	}
	added = true
	pidFile := filepath.Join(bundle, "pid")
	create, err := timed(OpRuncCreate, func() error { return runcCmd("create", "--bundle", bundle, "--pid-file", pidFile, id) })
	if err != nil {
		return err
	}
	created = true
	start, err := timed(OpRuncStart, func() error { return runcCmd("start", id) })
	if err != nil {
		return err
	}
	rep.add(OpPodUp, add+create+start)
	del, err := timed(OpCNIDel, func() error { return cni.DelNetworkList(ctx, list, rtConf) })
	if err != nil {
		return err
	}
	added = false
	if force {
		if _, err := timed(OpRuncDelete, func() error { return runcCmd("delete", "-f", id) }); err != nil {
			return err
		}
		created = false
		return nil
	}
	pidfd, err := openPidFile(pidFile)
	if err != nil {
		return err
	}
	defer unix.Close(pidfd)
	kill, err := timed(OpRuncKill, func() error {
		if err := runcCmd("kill", id, "KILL"); err != nil {
			return err
		}
		return waitPidfd(ctx, pidfd)
	})
	if err != nil {
		return err
	}
	remove, err := timed(OpRuncRemove, func() error { return runcCmd("delete", id) })
	if err != nil {
		return err
	}
	created = false
	rep.add(OpPodDown, del+kill+remove)
	return nil
}

// openPidFile opens a pidfd of the process whose PID is in file.
func openPidFile(file string) (int, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return -1, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return -1, fmt.Errorf("%s: %w", file, err)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd of %d: %w", pid, err)
	}
	return fd, nil
}

// waitPidfd waits until the process of pidfd has exited (a pidfd polls readable then,
// reaped or not), at most 10 s.
func waitPidfd(ctx context.Context, pidfd int) error {
	end := time.Now().Add(10 * time.Second)
	for ctx.Err() == nil && time.Now().Before(end) {
		fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll pidfd: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
	return fmt.Errorf("the container did not exit after SIGKILL: %w", errors.Join(ctx.Err(), os.ErrDeadlineExceeded))
}

// makeBusyboxBundle makes an OCI bundle at dir whose root file system holds the static
// busybox binary and links to it, with the spec `runc spec` writes.
func makeBusyboxBundle(ctx context.Context, runc, busybox, dir string) error {
	bb, err := exec.LookPath(busybox)
	if err != nil {
		return err
	}
	bin := filepath.Join(dir, "rootfs", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bin, "busybox"), data, 0o755); err != nil {
		return err
	}
	for _, name := range []string{"sh", "sleep", "true"} {
		if err := os.Symlink("busybox", filepath.Join(bin, name)); err != nil {
			return err
		}
	}
	if out, err := exec.CommandContext(ctx, runc, "spec", "--bundle", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("runc spec: %w: %s", err, out)
	}
	return nil
}

// writeBundleConfig writes the config.json of bundle from template's (which `runc spec`
// wrote): no terminal, the command, template's root file system, and the network
// namespace at nsPath (as a pod's container joins its sandbox's).
func writeBundleConfig(template, bundle string, command []string, nsPath string) error {
	path := filepath.Join(template, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if spec.Process == nil || spec.Linux == nil {
		return fmt.Errorf("%s: no process or linux section", path)
	}
	spec.Process.Terminal = false
	spec.Process.Args = command
	if spec.Root == nil {
		return fmt.Errorf("%s: no root", path)
	}
	spec.Root.Path = filepath.Join(template, spec.Root.Path)
	for i, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			spec.Linux.Namespaces[i].Path = nsPath
		}
	}
	data, err = json.Marshal(&spec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o644)
}

// WriteTable prints the floor for people.
func (r *FloorReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "floor: runc and the CNI plugin by themselves, %d runs\n", r.Runs)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STEP\tP50 ms\tP90 ms\tMAX ms\t")
	for _, op := range FloorSteps {
		s, ok := r.Ops[op]
		if !ok {
			continue
		}
		name := string(op)
		switch op {
		case OpPodUp:
			name = "pod up (ADD + create + start)"
		case OpPodDown:
			name = "pod down (DEL + kill + exit + delete)"
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t\n", name, s.P50ms, s.P90ms, s.MaxMs)
	}
	tw.Flush()
}

// WithFloor is a run's report with the floor measured after it.
type WithFloor struct {
	Report *Report      `json:"report"`
	Floor  *FloorReport `json:"floor"`
	// FloorRatios are PodUp and PodDown p50 over the floor's.
	FloorRatios map[Op]float64 `json:"floor_ratios"`
}

// NewWithFloor puts rep and its floor f together and computes the ratios.
func NewWithFloor(rep *Report, f *FloorReport) *WithFloor {
	w := &WithFloor{Report: rep, Floor: f, FloorRatios: map[Op]float64{}}
	for _, op := range []Op{OpPodUp, OpPodDown} {
		if fl := f.Ops[op].P50; fl > 0 && rep.Ops[op].P50 > 0 {
			w.FloorRatios[op] = float64(rep.Ops[op].P50) / float64(fl)
		}
	}
	return w
}

// WriteTable prints the report, the floor and the ratios for people.
func (w *WithFloor) WriteTable(out io.Writer) {
	w.Report.WriteTable(out)
	w.Floor.WriteTable(out)
	for _, op := range []Op{OpPodUp, OpPodDown} {
		if r, ok := w.FloorRatios[op]; ok {
			fmt.Fprintf(out, "%s / floor: %.1f / %.1f ms = %.2f\n", op, w.Report.Ops[op].P50ms, w.Floor.Ops[op].P50ms, r)
		}
	}
}

// lastLine returns the last non-empty line of b.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
