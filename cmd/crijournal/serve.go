package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/internal/pause"
	"github.com/crijournal/crijournal/internal/procs"
	"github.com/crijournal/crijournal/internal/residency"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/metrics"
	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/nri"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/profiling"
	"github.com/crijournal/crijournal/recovery"
	"github.com/crijournal/crijournal/server"
	"github.com/crijournal/crijournal/storage"
	"github.com/crijournal/crijournal/tracing"
	"github.com/crijournal/crijournal/units"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		c := &cobra.Command{
			Use:   "serve",
			Short: "Serve the CRI on the configured unix socket (the default command)",
			Args:  cobra.NoArgs,
			RunE:  runServe,
		}
		addServeFlags(c)
		return c
	})
}

// addServeFlags adds the flags of serving that are no configuration of the node: the
// serve command's, and the root command's (which serves without a subcommand).
func addServeFlags(c *cobra.Command) {
	c.Flags().String("pid-file", "", "write the daemon's PID to this file once it serves (removed when it stops)")
}

// gracefulStopTimeout bounds how long a stopping daemon waits for requests in flight
// before it cuts them off; anything they left half done is the next start's to recover.
const gracefulStopTimeout = 5 * time.Second

// staticWindow is the gRPC server's flow-control window, per call and per connection
// (see newGRPCServer).
const staticWindow = 1 << 20

// runServe assembles the daemon stage by stage (each a method of serving with one job,
// whose cleanup runs when serving ends, in the reverse order) and serves the CRI until
// SIGINT or SIGTERM.
func runServe(cmd *cobra.Command, args []string) error {
	cfg, err := loadConfig(cmd)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	if err := failpoint.Check(); err != nil {
		return err
	}
	slog.SetDefault(log)

	d := &serving{cfg: cfg, log: log}
	d.pidFile, _ = cmd.Flags().GetString("pid-file") // absent in tests' commands: ""
	defer d.close()
	for _, stage := range []func() error{
		d.checkJournal,    // a journal a newer release wrote: refused before anything is made
		d.checkNode,       // the pause program, systemd, becoming the subreaper
		d.openRuntimes,    // before anything is opened: a runtime refused stops the daemon here
		d.openJournal,     // NRI, the undo registry, the journal (its lock: no other daemon runs), the CNI networks
		d.openStorage,     // images and root filesystems: cleaned up at Open, which only the journal's holder may do
		d.recover,         // the server, recovery, NRI plugins started
		d.serveDiagnostic, // metrics and profiles
		d.startBackground, // exit watches, stats, journal maintenance, the CNI watch
	} {
		if err := stage(); err != nil {
			return err
		}
	}
	return d.serve()
}

// serving is the daemon runServe assembles: what each stage made, for the stages after
// it, and the cleanups of each.
type serving struct {
	cfg     config.Config
	log     *slog.Logger
	pidFile string // --pid-file: written once serving, removed at the end; "" for none

	ctx  context.Context // ends at SIGINT or SIGTERM, or when serving ends
	stop context.CancelFunc

	metrics  *metrics.Metrics
	runtimes *runtimeSet
	images   *storage.Store
	plugins  *nri.NRI
	networks *netns.Networks
	journal  *journal.Journal
	srv      *server.Server
	traces   *tracing.Tracing // nil when tracing is off

	maintained chan struct{} // closed when the journal's Maintain has returned

	cleanups []func() // run by close, last first
}

// onClose adds a cleanup, run by close before those added earlier.
func (d *serving) onClose(f func()) { d.cleanups = append(d.cleanups, f) }

// close runs the cleanups, last first.
func (d *serving) close() {
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		d.cleanups[i]()
	}
}

// checkJournal refuses to start on a journal that a newer release wrote (a rollback
// past a schema change), naming both releases, before any stage makes anything: the
// state is left as the newer release left it, for it to start on again.
func (d *serving) checkJournal() error {
	return journal.CheckSchema(d.cfg.Layout().JournalFile(), version, d.cfg.JournalLockTimeout)
}

// checkNode checks what the daemon needs of the node (the pause program, systemd for
// its cgroup driver), makes the metrics, and becomes the child subreaper that reaps the
// containers' processes it inherits, until serving ends.
func (d *serving) checkNode() error {
	cfg, log := d.cfg, d.log
	if cfg.MetricsAddress != "" {
		d.metrics = metrics.New(func() []journal.Record { return d.journal.List(nil) })
	}
	if err := checkPauseProgram(cfg, log); err != nil {
		return err
	}
	if cfg.SystemdCgroup() && !units.Running() {
		return fmt.Errorf("cgroup_manager = %q, but systemd does not run this node (no /run/systemd/system): use %q, or run the daemon where systemd is PID 1",
			config.CgroupManagerSystemd, config.CgroupManagerCgroupfs)
	}
	subreaper := oci.BecomeSubreaper()
	if subreaper != nil {
		log.Warn("cannot become a child subreaper: processes killed by ExecSync timeouts may linger as zombies", "err", subreaper)
	}
	d.ctx, d.stop = signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	d.onClose(d.stop)
	if subreaper == nil {
		// Zombies of containers' processes the daemon inherits would keep their
		// containers from exiting (see oci.ReapOrphans).
		reaperDone := make(chan struct{})
		go func() {
			defer close(reaperDone)
			oci.ReapOrphans(d.ctx, time.Second, func(pid, nsPid int) {
				log.Info("reaped a container's process the daemon inherited", "pid", pid, "pid_in_container", nsPid)
			})
		}()
		d.onClose(func() { d.stop(); <-reaperDone })
	}
	return nil
}

// openRuntimes makes the OCI runtime handlers and checks their versions: a runtime
// refused stops the daemon before anything is opened.
func (d *serving) openRuntimes() error {
	d.runtimes = newRuntimeSet(d.cfg, logSizeMax(d.ctx, d.cfg, d.log))
	return checkRuntimeVersions(d.ctx, d.cfg, d.runtimes, d.log)
}

// openStorage opens the image storage (containers/storage and containers/image).
func (d *serving) openStorage() error {
	cfg, node := d.cfg, d.cfg.Layout()
	images, err := storage.Open(d.ctx, storage.Options{
		Root: node.StorageRootDir(), RunRoot: node.StorageRunRootDir(), Driver: cfg.StorageDriver,
		Registries: storageRegistries(cfg), ImageCacheDir: node.ImageCacheDir(), Logger: d.log,
		RegistriesConf: cfg.RegistriesConf, RegistriesConfDir: cfg.RegistriesConfDir,
		SignaturePolicy: cfg.SignaturePolicy, AuthFile: cfg.GlobalAuthFile,
		TransientStore: cfg.StorageTransientStore, PullProgressTimeout: cfg.ImagePullProgressTimeout,
		ImageStore: cfg.ImageStore, PinnedImages: cfg.PinnedImages,
	})
	if err != nil {
		return err
	}
	d.images = images
	d.onClose(func() { images.Close() })
	d.log.Info("image storage ready", "driver", images.Driver(), "root", node.StorageRootDir(), "image_store", cfg.ImageStore)
	return nil
}

// openJournal makes NRI and the CNI networks, registers every step kind's undo and opens
// the journal.
func (d *serving) openJournal() error {
	cfg, log := d.cfg, d.log
	// NRI: made before the undo registry, which its steps' undos need; started once
	// recovery has run, so that plugins are synchronized with what the journal holds.
	plugins, err := nri.New(nri.Options{Enable: cfg.EnableNRI, Socket: cfg.NRIListen, PluginDir: cfg.NRIPluginDir,
		PluginConfigDir: cfg.NRIPluginConfigDir, RegistrationTimeout: cfg.NRIPluginRegistrationTimeout,
		RequestTimeout: cfg.NRIPluginRequestTimeout, DisableConnections: cfg.NRIDisableConnections,
		Version: version, Log: log})
	if err != nil {
		return err
	}
	d.plugins = plugins

	// Tracing, when configured: off, nothing of it is made (package tracing).
	traces, err := tracing.Start(d.ctx, tracing.Settings{Endpoint: cfg.TracingEndpoint,
		SamplingRatePerMillion: cfg.TracingSamplingRatePerMillion, Version: version}, os.Getenv, log)
	if err != nil {
		return err
	}
	if traces != nil {
		d.traces = traces
		log.Info("tracing on", traces.LogAttrs()...)
		// After the journal's close (a cleanup added later runs earlier): the spans of
		// the whole stop are flushed, within tracing.ShutdownTimeout.
		d.onClose(func() {
			if err := traces.Shutdown(); err != nil {
				log.Warn("spans lost at the stop", "err", err)
			}
		})
	}

	registry := journal.NewRegistry()
	d.networks = &netns.Networks{ConfDir: cfg.CNIConfDir, PluginDirs: cfg.CNIPluginDirs, CacheDir: cfg.CNICacheDir}
	netns.RegisterUndos(registry, d.networks)
	storage.RegisterUndos(registry, func() (*storage.Store, error) { return d.images, nil })
	oci.RegisterUndos(registry, d.runtimes.Runtime)
	checkpoint.RegisterUndos(registry, d.runtimes.Runtime)
	nri.RegisterUndos(registry, plugins)
	units.RegisterUndos(registry)

	j, err := journal.Open(cfg.Layout().JournalFile(), journal.Options{
		LockTimeout:  cfg.JournalLockTimeout,
		NoSync:       cfg.JournalNoSync,
		CacheTTL:     cfg.CacheTTL,
		UndoRetryMin: cfg.UndoRetryMin,
		UndoRetryMax: cfg.UndoRetryMax,
		UndoTimeout:  cfg.UndoTimeout,
		SpaceReserve: cfg.JournalReserve(),
		Release:      version,
		Registry:     registry,
		Logger:       log,
		Hooks:        d.metrics.JournalHooks(),
		Tracer:       d.traces.Tracer(),
	})
	if err != nil {
		return err
	}
	d.journal = j
	d.onClose(func() { j.Close() })
	if cfg.JournalNoSync {
		log.Warn("journal_no_sync is on: commits are not fsynced; THIS IS UNSAFE, a crash can lose or corrupt the journal; for benchmarks only")
	}
	if _, err := d.networks.Network(); err != nil {
		log.Warn("no CNI network yet; pods that need one will fail until a configuration appears", "err", err)
	}
	return nil
}

// recover makes the server, recovers the journal (rolls back what a crash cut short,
// keeps what finished late) and starts the NRI plugins, synchronized with what it holds.
func (d *serving) recover() error {
	cfg, log, j, m := d.cfg, d.log, d.journal, d.metrics
	d.srv = server.New(server.Deps{Config: cfg, Journal: j, Networks: d.networks, Metrics: m,
		Images: d.images, Runtimes: d.runtimes, Version: version, Log: log, NRI: d.plugins})
	d.onClose(d.srv.Close)
	freeTornAddresses(cfg.CNIConfDir, log)
	removeTornResults(cfg.CNIConfDir, cfg.Layout().CNIResultsDir(), log)
	start := time.Now()
	sum := recovery.Run(d.ctx, j, log, d.srv.Reconcile)
	log.Debug("recovery took", "duration", time.Since(start))
	if err := j.Err(); err != nil {
		return failStop(cfg, "during recovery", err)
	}
	if err := d.plugins.Start(d.srv.NRISource()); err != nil {
		return err
	}
	d.onClose(d.plugins.Stop)
	if d.plugins.Enabled() {
		log.Info("NRI enabled", "socket", cfg.NRIListen, "plugin_dir", cfg.NRIPluginDir)
	}
	for outcome, n := range map[string]int{"rolled_back": sum.RolledBack, "cached": sum.Cached, "kept": sum.Kept,
		"resumed": sum.Resumed, "reconciled": sum.Reconciled, "retrying": sum.Retrying} {
		m.Recovered(outcome, n)
	}
	return nil
}

// freeTornAddresses frees the addresses whose host-local file a power cut left empty
// (see netns.RemoveTornAllocations): no DEL could ever free them.
func freeTornAddresses(confDir string, log *slog.Logger) {
	dirs, err := netns.HostLocalDirs(confDir)
	if err != nil {
		log.Warn("host-local's files torn by a power cut were not looked for", "err", err)
		return
	}
	for _, dir := range dirs {
		freed, err := netns.RemoveTornAllocations(dir)
		if len(freed) > 0 {
			log.Warn("freed the addresses whose host-local file a power cut left empty", "dir", dir, "addresses", freed)
		}
		if err != nil {
			log.Warn("host-local's files torn by a power cut were not all removed", "dir", dir, "err", err)
		}
	}
}

// removeTornResults removes libcni's cached results that a power cut left empty (see
// netns.RemoveTornResults), before recovery: a DEL fails on one.
func removeTornResults(confDir, resultsDir string, log *slog.Logger) {
	removed, err := tornResults(confDir, resultsDir)
	if len(removed) > 0 {
		log.Warn("removed libcni's cached results that a power cut left empty", "dir", resultsDir, "files", removed)
	}
	if err != nil {
		log.Warn("libcni's cached results torn by a power cut were not all removed", "dir", resultsDir, "err", err)
	}
}

func tornResults(confDir, resultsDir string) ([]string, error) {
	names, err := netns.NetworkNames(confDir)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	boot, err := netns.BootTime()
	if err != nil {
		return nil, err
	}
	return netns.RemoveTornResults(resultsDir, names, boot)
}

// serveDiagnostic serves the metrics and Go's profiles, when configured.
func (d *serving) serveDiagnostic() error {
	cfg, log, m := d.cfg, d.log, d.metrics
	if m != nil {
		var tlsFiles *metrics.TLSFiles
		scheme := "http"
		if cfg.MetricsCert != "" {
			tlsFiles, scheme = &metrics.TLSFiles{CertFile: cfg.MetricsCert, KeyFile: cfg.MetricsKey}, "https"
		}
		addr, err := m.Serve(d.ctx, cfg.MetricsAddress, tlsFiles)
		if err != nil {
			return err
		}
		log.Info("metrics served", "address", scheme+"://"+addr+"/metrics")
		if tlsFiles == nil && !isLoopback(addr) {
			log.Warn("metrics are served in plain HTTP on a node address; set metrics_cert and metrics_key for HTTPS", "address", addr)
		}
	}

	if cfg.PprofAddress != "" {
		prof, err := profiling.Serve(d.ctx, cfg.PprofAddress)
		if err != nil {
			return err
		}
		d.onClose(func() { prof.Close() })
		log.Info("profiles served", "address", "http://"+prof.Addr()+"/debug/pprof/")
	}
	return nil
}

// startBackground starts the daemon's background work: the watches of container exits,
// the writable layers' usage, the journal's maintenance and the watch of the CNI
// configuration directory.
func (d *serving) startBackground() error {
	cfg, log, ctx, srv := d.cfg, d.log, d.ctx, d.srv
	for _, rt := range d.runtimes.all() {
		go func() {
			if err := rt.WatchExits(ctx, srv.OnContainerExit); err != nil && ctx.Err() == nil {
				log.Error("watching container exits failed; exits are noticed on status calls only", "handler", rt.Handler(), "err", err)
			}
		}()
	}

	// The writable layers' usage is measured in the background; srv.Close (a cleanup of
	// recover) stops that and waits for it.
	srv.StartStatsCollection()

	maintained := make(chan struct{})
	d.maintained = maintained
	go func() {
		defer close(maintained)
		d.journal.Maintain(ctx, cfg.CacheSweepInterval)
	}()
	// The CNI configuration directory is watched for the life of the daemon: new pods use
	// the network configured now, and NetworkReady follows the directory.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if err := d.networks.Watch(ctx); err != nil {
			log.Warn("the CNI configuration directory is no longer watched: a changed network is noticed only after a restart", "dir", cfg.CNIConfDir, "err", err)
		}
	}()
	// However serving ends, the journal's maintenance and the watch stop before the
	// journal closes.
	d.onClose(func() {
		d.stop()
		<-maintained
		<-watched
	})
	return nil
}

// serve serves the CRI, the inspection socket and the streaming server until SIGINT or
// SIGTERM, a failed journal, or a failed server; then stops them in order.
func (d *serving) serve() error {
	cfg, log, j, srv := d.cfg, d.log, d.journal, d.srv
	lis, err := server.Listen(cfg.Socket)
	if err != nil {
		return err
	}
	if err := srv.ServeInspect(d.ctx, cfg.Layout().InspectSocket()); err != nil {
		lis.Close()
		return err
	}
	klog.SetSlogLogger(log) // the streaming library logs through klog
	streams, err := srv.StartStreaming()
	if err != nil {
		lis.Close()
		return err
	}
	log.Info("streaming server listening", "url", streams.URL)
	procs.Serving() // one processor from now on, but for image pulls (package procs)
	g := newGRPCServer(srv, d.traces.ServerOptions()...)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	log.Info("crijournal serving", "socket", cfg.Socket, "journal", cfg.Layout().JournalFile(), "version", version)
	if d.pidFile != "" {
		if err := writePidFile(d.pidFile); err != nil {
			log.Warn("could not write the PID file", "path", d.pidFile, "err", err)
		} else {
			defer removePidFile(d.pidFile)
		}
	}
	// Start-up touched code and data all over the binary that serving does not need.
	if err := residency.Release(); err != nil {
		log.Warn("could not release the executable's start-up pages", "err", err)
	}

	var failed error // the journal's failure, when that is why the daemon stops
	select {
	case <-d.ctx.Done():
		log.Info("stopping")
	case err := <-served:
		_ = streams.Stop()
		return fmt.Errorf("serve: %w", err)
	case <-j.Failed():
		// Fail-stop (DESIGN §6): every call but Status and Version is refused from
		// now on (see server.UnaryInterceptor); requests in flight fail on their next
		// journal call. The error is returned, and printed once, at the end.
		failed = j.Err()
		d.stop()
	}
	// Sessions end first: their processes are killed, their clients see the end. So do
	// the container event streams, which the graceful stop would wait for.
	if err := streams.Stop(); err != nil {
		log.Warn("stopping the streaming server", "err", err)
	}
	srv.StopEvents()
	stopGRPC(g, log)
	os.Remove(cfg.Socket)
	if failed != nil {
		return failStop(cfg, "while serving", failed)
	}
	// Removals that answered with work left (root filesystems to delete: see
	// journal.Remove) are finished before the journal closes, so that a stopped node
	// holds nothing removed; what does not finish in time, the next start finishes.
	// Maintain stops first: a deferred undo it is running is cut short by the stop,
	// and FinishRemovals runs it again.
	d.stop()
	<-d.maintained
	fctx, fcancel := context.WithTimeout(context.Background(), gracefulStopTimeout)
	defer fcancel()
	if err := j.FinishRemovals(fctx); err != nil {
		log.Warn("finishing the removals under way at the stop failed; the next start finishes them", "err", err)
	}
	return nil
}

// newGRPCServer makes the CRI's gRPC server with the server's services, and opts (the
// tracing's stats handler, when tracing is on).
//
// Stream workers: as many as the processors procs.Serving set (one, unless GOMAXPROCS
// says otherwise): a few goroutines that serve the calls one after another, their
// stacks grown once, instead of a new goroutine per call whose stack grows on every
// call (about 6 % of the CPU of the kubelet's status calls). A call that finds every
// worker busy still gets a goroutine of its own, so nothing waits for a worker.
//
// Static flow-control windows: with the default dynamic window, gRPC estimates the
// connection's bandwidth with a PING after the first DATA frame of each burst, which
// for a client that sends one small request at a time is a PING per call (mostly
// written with the answer) and a read of its ACK: about 7 % of the socket reads and
// writes of a kubelet-style poll, measured. CRI requests are small (the big payloads,
// exec and attach streams and image layers, do not travel over this connection): a
// fixed window of staticWindow is larger than any the kubelet sends, and a larger
// one (up to gRPC's 4 MiB limit) still passes, a window at a time.
func newGRPCServer(srv *server.Server, opts ...grpc.ServerOption) *grpc.Server {
	g := grpc.NewServer(append([]grpc.ServerOption{grpc.UnaryInterceptor(srv.UnaryInterceptor), grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))),
		grpc.StaticStreamWindowSize(staticWindow), grpc.StaticConnWindowSize(staticWindow)}, opts...)...)
	srv.Register(g)
	return g
}

// stopGRPC stops g gracefully, cutting off the requests still running after
// gracefulStopTimeout.
func stopGRPC(g *grpc.Server, log *slog.Logger) {
	stopped := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(gracefulStopTimeout):
		log.Warn("requests still running after the graceful stop timeout: cutting them off; the next start recovers what they left", "timeout", gracefulStopTimeout)
		g.Stop()
	}
}

// failStop is the error the daemon exits with (non-zero) when a journal commit failed:
// what failed and what to do, so that a service manager's log says it in one line.
func failStop(cfg config.Config, when string, err error) error {
	return fmt.Errorf("stopped %s: %w; free the space or fix the disk of %s, then start again: the next start recovers from the file", when, err, cfg.Layout().JournalFile())
}

// newLogger builds the daemon's logger from the configured level and format.
func newLogger(cfg config.Config) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: cfg.SlogLevel()}
	switch cfg.LogFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text", "":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("log_format %q: want text or json", cfg.LogFormat)
}

func storageRegistries(cfg config.Config) []storage.Registry {
	out := make([]storage.Registry, len(cfg.Registries))
	for i, r := range cfg.Registries {
		out[i] = storage.Registry(r)
	}
	return out
}

// isLoopback reports whether the host of addr (host:port) is a loopback address.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// checkPauseProgram refuses to start without the pause program: every pod that shares
// its pid namespace (the CRI's default) or has a user namespace of its own needs it.
// Without the sleeper beside it, which the default install has, it warns: pause
// processes then keep several times the memory.
func checkPauseProgram(cfg config.Config, log *slog.Logger) error {
	p, err := server.PauseProgramPath(cfg)
	if err != nil {
		return err
	}
	st, err := os.Stat(p)
	if err == nil && (st.IsDir() || st.Mode().Perm()&0o111 == 0) {
		err = errors.New("not an executable file")
	}
	if err != nil {
		return fmt.Errorf("pause program %s: %w (build it with make build, which puts %s beside the daemon's binary, or set pause_path)",
			p, err, server.PauseProgramName)
	}
	if _, err := os.Stat(pause.SleeperPath(p)); err != nil {
		log.Warn("no sleeper beside the pause program: pause processes stay Go programs, of a few MiB each (make build builds it, make install installs it)",
			"sleeper", pause.SleeperPath(p), "err", err)
	}
	return nil
}

// writePidFile writes the daemon's PID to path (atomically: a reader sees the whole
// number or no file), as decimal digits without a newline: the kubelet's node e2e suite
// reads --container-runtime-pid-file with strconv.Atoi on the whole file.
func writePidFile(path string) error {
	return renameio.WriteFile(path, []byte(strconv.Itoa(os.Getpid())), 0o644)
}

// removePidFile removes path if it still holds this daemon's PID (a daemon started
// after this one may have written its own).
func removePidFile(path string) {
	if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		os.Remove(path)
	}
}
