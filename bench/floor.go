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
// the others). Each step runs alone, so the figures are each one's own cost. Runs go
// o.Concurrency at a time, every run's up first and then every run's down, as a pods
// workload's pods do. It removes what it made (bundle, containers, namespaces, the
// default network's bridge).
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
	pods := make([]*floorPod, o.Runs)
	for i := range pods {
		pods[i] = &floorPod{o: o, runc: runc, root: root, template: bundle, dir: dir,
			id: fmt.Sprintf("cjfloor-%d-%d", os.Getpid(), i), force: i%2 == 1, list: list, rep: rep}
	}
	// Whatever a failed or interrupted run left, its container and its network first,
	// then its namespace.
	defer func() {
		for _, p := range pods {
			if cerr := p.clean(context.WithoutCancel(ctx)); cerr != nil {
				err = errors.Join(err, fmt.Errorf("floor: %w", cerr))
			}
		}
	}()
	// All the runs' ups, o.Concurrency at a time, then all their downs: the phases a
	// pods workload has (its pods come up, then go down), so that an up competes with
	// other ups only, as a pod's does.
	for _, phase := range []func(*floorPod, context.Context) error{(*floorPod).up, (*floorPod).down} {
		if err := floorPhase(ctx, o.Concurrency, pods, phase); err != nil {
			return nil, err
		}
	}
	rep.finish()
	return &FloorReport{Runs: o.Runs, Ops: rep.Ops}, nil
}

// floorPhase runs phase on every pod, concurrency at a time.
func floorPhase(ctx context.Context, concurrency int, pods []*floorPod, phase func(*floorPod, context.Context) error) error {
	work := make(chan int)
	errs := make([]error, len(pods))
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := phase(pods[i], ctx); err != nil {
					errs[i] = fmt.Errorf("floor: run %d: %w", i+1, err)
				}
			}
		}()
	}
	for i := range pods {
		work <- i
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}

// floorPod is one run of Floor, as container id, with its own network namespace and
// bundle: up times the CNI ADD, runc create and runc start, down the CNI DEL and the
// container's end (with force, runc delete -f; else runc kill, the exit, runc delete).
// What it has made is in its fields, for down and for clean.
type floorPod struct {
	o                         FloorOptions
	runc, root, template, dir string
	id                        string
	force                     bool
	list                      *libcni.NetworkConfigList
	rep                       *Report
	cni                       *libcni.CNIConfig
	nsPath, bundle            string
	added, created            bool
}

// runcCmd runs runc with args in the pod's bundle.
func (p *floorPod) runcCmd(ctx context.Context, args ...string) error {
	logPath := filepath.Join(p.bundle, "runc.log")
	cmd := exec.CommandContext(ctx, p.runc, append([]string{"--root", p.root, "--log", logPath}, args...)...)
	cmd.Dir = p.bundle
	// The container inherits runc's stdio: a pipe would keep Wait waiting for as
	// long as the container runs. Its streams are /dev/null, runc's messages go to
	// its log file.
	if err := cmd.Run(); err != nil {
		msg, _ := os.ReadFile(logPath)
		return fmt.Errorf("runc %s: %w: %s", args[0], err, lastLine(msg))
	}
	return nil
}

func (p *floorPod) rtConf() *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.id, NetNS: p.nsPath, IfName: "eth0"}
}

// timed runs f and records how long it took as op.
func (p *floorPod) timed(op Op, f func() error) (time.Duration, error) {
	t := time.Now()
	if err := f(); err != nil {
		return 0, err
	}
	d := time.Since(t)
	p.rep.add(op, d)
	return d, nil
}

// up makes the pod's namespace and bundle (untimed), then times its CNI ADD, runc create
// and runc start.
func (p *floorPod) up(ctx context.Context) error {
	pins, err := netns.Pin(ctx, filepath.Join(p.dir, "ns"), p.id, []netns.Kind{netns.Net}, "")
	if err != nil {
		return err
	}
	p.nsPath = pins[netns.Net]
	// A bundle per run (runs may be concurrent), sharing the read-only root file system.
	p.bundle = filepath.Join(p.dir, "bundles", p.id)
	if err := os.MkdirAll(p.bundle, 0o755); err != nil {
		return err
	}
	if err := writeBundleConfig(p.template, p.bundle, p.o.Command, p.nsPath); err != nil {
		return err
	}
	// One per pod: a CNIConfig sets itself up on first use, unguarded.
	p.cni = libcni.NewCNIConfigWithCacheDir(p.o.CNIPluginDirs, filepath.Join(p.dir, "cni-cache"), nil)
	add, err := p.timed(OpCNIAdd, func() error { _, err := p.cni.AddNetworkList(ctx, p.list, p.rtConf()); return err })
	if err != nil {
		return err
	}
	p.added = true
	create, err := p.timed(OpRuncCreate, func() error {
		return p.runcCmd(ctx, "create", "--bundle", p.bundle, "--pid-file", filepath.Join(p.bundle, "pid"), p.id)
	})
	if err != nil {
		return err
	}
	p.created = true
	start, err := p.timed(OpRuncStart, func() error { return p.runcCmd(ctx, "start", p.id) })
	if err != nil {
		return err
	}
	p.rep.add(OpPodUp, add+create+start)
	return nil
}

// down times the pod's CNI DEL and its container's end, then removes its namespace.
func (p *floorPod) down(ctx context.Context) error {
	del, err := p.timed(OpCNIDel, func() error { return p.cni.DelNetworkList(ctx, p.list, p.rtConf()) })
	if err != nil {
		return err
	}
	p.added = false
	if p.force {
		if _, err := p.timed(OpRuncDelete, func() error { return p.runcCmd(ctx, "delete", "-f", p.id) }); err != nil {
			return err
		}
		p.created = false
		return p.clean(ctx)
	}
	pidfd, err := openPidFile(filepath.Join(p.bundle, "pid"))
	if err != nil {
		return err
	}
	defer unix.Close(pidfd)
	kill, err := p.timed(OpRuncKill, func() error {
		if err := p.runcCmd(ctx, "kill", p.id, "KILL"); err != nil {
			return err
		}
		return waitPidfd(ctx, pidfd)
	})
	if err != nil {
		return err
	}
	remove, err := p.timed(OpRuncRemove, func() error { return p.runcCmd(ctx, "delete", p.id) })
	if err != nil {
		return err
	}
	p.created = false
	p.rep.add(OpPodDown, del+kill+remove)
	return p.clean(ctx)
}

// clean removes what the pod still has: its container, its network, its namespace.
// Nothing left is success, so it may run more than once.
func (p *floorPod) clean(ctx context.Context) error {
	var err error
	if p.created {
		if derr := p.runcCmd(ctx, "delete", "-f", p.id); derr != nil {
			err = errors.Join(err, derr)
		} else {
			p.created = false
		}
	}
	if p.added {
		if derr := p.cni.DelNetworkList(ctx, p.list, p.rtConf()); derr != nil {
			err = errors.Join(err, derr)
		} else {
			p.added = false
		}
	}
	if p.nsPath != "" {
		if uerr := netns.Unpin(ctx, p.nsPath); uerr != nil {
			err = errors.Join(err, uerr)
		} else {
			p.nsPath = ""
		}
	}
	return err
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
	// Targets are the targets the run and its floor measured (targets.go).
	Targets []Target `json:"targets,omitempty"`
}

// NewWithFloor puts rep and its floor f together and computes the ratios.
func NewWithFloor(rep *Report, f *FloorReport) *WithFloor {
	w := &WithFloor{Report: rep, Floor: f, FloorRatios: map[Op]float64{}}
	for _, op := range []Op{OpPodUp, OpPodDown} {
		if fl := f.Ops[op].P50; fl > 0 && rep.Ops[op].P50 > 0 {
			w.FloorRatios[op] = float64(rep.Ops[op].P50) / float64(fl)
		}
	}
	w.Targets = w.targets()
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
	writeTargets(out, w.Targets)
}

// lastLine returns the last non-empty line of b.
func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
