// Package server implements the CRI runtime.v1 RuntimeService and ImageService of
// crijournal on top of the journal: request validation, the create, claim, wait and remove
// flows, and the mapping of errors to gRPC status codes.
//
// Every creation follows one straight line (see RunPodSandbox) through one handle of the
// creation engine (package creation, which owns reservation, waiting, claiming and the
// journaled steps): validate; reserve the name in the journal (creation.Engine.Begin), or
// settle the request from the record that already holds it; then the steps, as plans
// (creation.AddStep, creation.AddStepBeside, Plan.Run: the intents of a plan's steps in one
// commit, then each step acts, alone or beside others, and is marked done) or one at a time
// (creation.Step), the creation rolled back when a step fails; finally Finish, which makes
// the record created when the request is still live and cached when it is not. The steps
// themselves are values (journal.Action) made by the packages that own the resources
// (netns, storage, oci, nri).
//
// Handlers return plain Go errors that wrap a class (errors.go) or a package's typed
// error; toStatus, called by UnaryInterceptor, chooses the gRPC code in one table.
//
// # Layout
//
// A CRI call goes in <noun>_<verb>.go, named after the call, as in containerd's and
// CRI-O's servers: sandbox_run.go (RunPodSandbox), sandbox_stop.go (StopPodSandbox,
// RemovePodSandbox), sandbox_status.go (PodSandboxStatus, ListPodSandbox),
// sandbox_portforward.go, container_create.go, container_start.go, container_stop.go,
// container_remove.go, container_status.go (ContainerStatus, ListContainers),
// container_update.go, container_exec.go (ExecSync, Exec, Attach),
// container_log_reopen.go, container_events.go (GetContainerEvents; what the events
// are, read from the journal, in container_events_source.go); the NRI events and what
// NRI plugins ask of the runtime in nri.go; the stats calls are in stats.go, the CRI
// metrics ones (ListMetricDescriptors, ListPodSandboxMetrics) in stats_metrics.go, the
// runtime-wide ones
// (Version, Status, RuntimeConfig, UpdateRuntimeConfig) in status.go, the
// ImageService in image.go. A helper that one call uses lives in its file, or beside
// it in <noun>_<topic>.go (container_mounts.go, container_exit.go, sandbox_watch.go);
// what several calls share has a file of its own: the record types (sandbox.go,
// container.go), the look-ups of records (records.go), names and identities (name.go),
// fingerprints (fingerprint.go), the
// session adapter of the streaming server (streaming.go; the server itself is package
// stream). A new step goes in its resource package (netns, storage, oci), made as one
// journal.Action by one constructor; a decision about the runtime (what a spec holds,
// how a container ended) goes in oci, and the server only records it.
package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/metrics"
	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/nri"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/server/stream"
	"github.com/crijournal/crijournal/storage"
)

// RuntimeName is what Version reports.
const RuntimeName = "crijournal"

// Server is the CRI service. Build it with New and attach it with Register.
type Server struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	cfg         config.Config
	journal     *journal.Journal
	creations   *creation.Engine // reserves names and drives the creations' steps
	networks    netns.NetworkSource
	metrics     *metrics.Metrics
	images      *storage.Store
	runtimes    RuntimeSource
	version     string
	log         *slog.Logger
	pods        podGates                      // keeps a pod's container creations and its removal apart
	teardowns   teardowns                     // keeps the stops and removals of one sandbox apart
	streams     atomic.Pointer[stream.Server] // set by StartStreaming
	stats       statsState
	layers      *layerCollector // the writable layers' usage; nil without storage
	collected   chan struct{}   // closed when the collecting goroutine ends; nil until started
	node        nodeConfig      // what UpdateRuntimeConfig said
	cdi         *oci.CDI        // CDI devices, from cdi_spec_dirs
	nri         *nri.NRI        // NRI plugins; nil when disabled
	nriStops    nriStops        // keeps a container's StopContainer events apart
	reaper      *exitReaper     // deletes the runtime containers of exited containers
	execSyncs   execSlots       // the ExecSync calls running (exec_sync_max_concurrent)
	checkpoints sync.Map        // container ID -> struct{}: the checkpoint exports under way

	events       eventFeed // the container events' streams (GetContainerEvents)
	pauseWatches sync.Map  // sandbox ID -> struct{}: pause processes watched (watchPause)
	// sandboxCache and containerCache keep decoded objects for the List calls: what
	// they hand out is shared, read only (see decodeCache). The record in it is stale:
	// listedSandbox and listedContainer put the current one in.
	sandboxCache   decodeCache[sandbox]
	containerCache decodeCache[container]
	// pauseProgram is the program a pause process runs (see PauseProgramPath).
	pauseProgram string
	// lifetime is the context of the work the server starts by itself (the watches of
	// pause processes, the feed of container events, the collection of stats, the
	// exit reaper); Close ends it.
	lifetime context.Context
	end      context.CancelFunc
}

// RuntimeSource hands out the OCI runtime of a runtime handler.
type RuntimeSource interface {
	Runtime(handler string) (*oci.Runtime, error)
}

// Deps are what a Server is built from.
type Deps struct {
	Config   config.Config
	Journal  *journal.Journal
	Networks netns.NetworkSource
	Metrics  *metrics.Metrics // nil: no metrics
	Images   *storage.Store   // nil: no images or containers
	Runtimes RuntimeSource    // nil: no containers
	Version  string
	Log      *slog.Logger
	NRI      *nri.NRI // nil: NRI disabled
}

// New returns a server over an open journal. Close it to stop the work it starts by
// itself.
func New(d Deps) *Server {
	s := &Server{cfg: d.Config, journal: d.Journal, creations: creation.New(d.Journal, d.Log, d.Metrics),
		networks: d.Networks, metrics: d.Metrics,
		images: d.Images, runtimes: d.Runtimes, version: d.Version, log: d.Log,
		cdi: oci.NewCDI(d.Config.CDISpecDirs), nri: d.NRI}
	s.lifetime, s.end = context.WithCancel(context.Background())
	s.reaper = newExitReaper()
	s.execSyncs = make(execSlots, max(d.Config.ExecSyncMaxConcurrent, 1))
	go s.reaper.run(s.lifetime, s.reapExited)
	if d.Images != nil {
		s.layers = &layerCollector{list: s.createdContainerIDs, find: d.Images.WritableLayerDir,
			measure: storage.DirUsage, now: time.Now, busy: s.containerCPU, log: d.Log, soon: newIDQueue()}
	}
	s.pauseProgram, _ = PauseProgramPath(d.Config) // StartPause refuses "": the daemon checks it at start
	if d.Runtimes != nil {
		// What the kernel allows pods in a user namespace on the node's network, asked
		// once now rather than in the first Status (see oci.ProbeUsernsHostNetwork).
		if err := oci.ProbeUsernsHostNetwork(); err != nil {
			s.log.Info("pods with their own user namespace cannot have the node's network", "err", err)
		}
	}
	return s
}

// PauseProgramName is the pause program's file name (cmd/crijournal-pause).
const PauseProgramName = "crijournal-pause"

// PauseProgramPath returns the pause program the daemon runs: pause_path, else
// crijournal-pause beside the daemon's own binary.
func PauseProgramPath(cfg config.Config) (string, error) {
	if cfg.PausePath != "" {
		return cfg.PausePath, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the pause program beside the daemon's binary: %w", err)
	}
	return filepath.Join(filepath.Dir(exe), PauseProgramName), nil
}

// Close stops the work the server started by itself: the watches of pause processes, the
// feed of container events, the collection of stats and the deletion of exited runtime
// containers, the last three of which it waits for. Call it once no request runs any more.
func (s *Server) Close() {
	s.end()
	<-s.reaper.done
	s.StopEvents()
	if s.collected != nil {
		<-s.collected
	}
}

// Register attaches the runtime and image services to g.
func (s *Server) Register(g *grpc.Server) {
	runtimeapi.RegisterRuntimeServiceServer(g, s)
	runtimeapi.RegisterImageServiceServer(g, &imageService{s: s})
}

// servedWhenFailed are the calls still answered once the journal has failed, so that the
// kubelet learns why the runtime is not ready; every other call is refused (fail-stop).
var servedWhenFailed = map[string]bool{
	"/runtime.v1.RuntimeService/Status":  true,
	"/runtime.v1.RuntimeService/Version": true,
}

// UnaryInterceptor turns every error a handler returns into a gRPC status (toStatus, the
// one place codes are chosen: handlers return wrapped Go errors) and logs each call at
// debug level.
func (s *Server) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	if jerr := s.journal.Err(); jerr != nil && !servedWhenFailed[info.FullMethod] {
		err := toStatus(newError(errUnavailable, "%v; the runtime is stopping and takes no more work", jerr))
		s.metrics.Operation(info.FullMethod, status.Code(err).String(), time.Since(start))
		return nil, err
	}
	resp, err := handler(ctx, req)
	if err != nil {
		err = toStatus(err)
	}
	s.metrics.Operation(info.FullMethod, status.Code(err).String(), time.Since(start))
	if err != nil {
		s.log.Debug("cri call failed", "method", info.FullMethod, "code", status.Code(err), "err", err, "took", time.Since(start))
		return nil, err
	}
	s.log.Debug("cri call", "method", info.FullMethod, "took", time.Since(start))
	return resp, nil
}

// infoJSON encodes v for the info of a verbose status call; what cannot be encoded is
// shown as its error, a JSON string.
func infoJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%q", err.Error())
	}
	return string(b)
}

// detached returns a context for work that must finish whatever happens to the request:
// removals, network teardowns, NRI events.
func detached(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), timeout)
}
