// Command cadvisor is the stand-in of gcr.io/cadvisor/cadvisor that the kubelet's node
// e2e suite runs as a pod in its Density and Resource-usage specs (test/e2e_node
// resource_collector.go), built from cAdvisor v0.61.0 itself: its container manager
// (github.com/google/cadvisor/lib/manager, the one the kubelet links too) watches the
// node's cgroups at --housekeeping_interval, and cAdvisor's own v2 conversion
// (github.com/google/cadvisor/info/v2) shapes the answers.
//
// cAdvisor's program (its cmd module, with the REST API and the web UI) is not served by
// the Go module proxy, so this program serves the part of the REST API the suite reads:
//
//	GET /api/v2.1/machine             the machine's info (the suite waits for a 200)
//	GET /api/v2.1/stats/<cgroup>      ?type=name&count=N&recursive=false: the latest N
//	                                  samples of a cgroup, as cAdvisor's v2.1 "stats"
//	GET /healthz                      "ok"
//	GET /debug/pprof/                 with --profiling
//
// It takes cAdvisor's flags (the library's: --housekeeping_interval,
// --max_housekeeping_interval, --allow_dynamic_housekeeping, ...; klog's -logtostderr;
// and the program's --port, --listen_ip, --profiling, --storage_duration,
// --raw_cgroup_prefix_whitelist). Only raw
// cgroups are watched: no docker, containerd or CRI-O factory (the suite asks for the
// kubelet's and the runtime's cgroups by name).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	v2 "github.com/google/cadvisor/info/v2"
	"github.com/google/cadvisor/lib/cache/memory"
	"github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/manager"
	"github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"k8s.io/klog/v2"
)

var (
	port            = flag.Int("port", 8080, "port to listen on")
	listenIP        = flag.String("listen_ip", "", "IP to listen on, all when empty")
	profiling       = flag.Bool("profiling", false, "serve Go's profiles at /debug/pprof/")
	storageDuration = flag.Duration("storage_duration", 2*time.Minute, "how long samples are kept in memory")
	rawPrefixes     = flag.String("raw_cgroup_prefix_whitelist", "", "comma-separated prefixes of the cgroups watched; empty for all")
)

// statsAPI is the path of cAdvisor's v2.1 stats; the cgroup's name follows it.
const statsAPI = "/api/v2.1/stats"

func main() {
	klog.InitFlags(nil)
	flag.Parse()
	if err := run(); err != nil {
		klog.Errorf("cadvisor: %v", err)
		os.Exit(1)
	}
}

// run starts the manager and serves the API until SIGINT or SIGTERM.
func run() error {
	metrics := container.MetricSet{
		container.CpuUsageMetrics:     struct{}{},
		container.MemoryUsageMetrics:  struct{}{},
		container.NetworkUsageMetrics: struct{}{},
		container.DiskIOMetrics:       struct{}{},
		container.OOMMetrics:          struct{}{},
	}
	// As cAdvisor's program: the split of an empty list is [""], the prefix of every cgroup
	// (with none, the raw factory watches none but the root).
	m, err := manager.New(memory.New(*storageDuration, nil), sysfs.NewRealSysFs(),
		manager.HousekeepingConfigFlags, metrics, strings.Split(*rawPrefixes, ","), nil, "", 0)
	if err != nil {
		return fmt.Errorf("the container manager: %w", err)
	}
	if err := m.Start(); err != nil {
		return fmt.Errorf("starting the container manager: %w", err)
	}
	defer m.Stop()

	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/api/v2.1/machine", func(w http.ResponseWriter, _ *http.Request) {
		info, err := m.GetMachineInfo()
		writeJSON(w, info, err)
	})
	mux.HandleFunc(statsAPI+"/", func(w http.ResponseWriter, r *http.Request) { serveStats(w, r, m) })
	if *profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}

	addr := net.JoinHostPort(*listenIP, strconv.Itoa(*port))
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()
	klog.Infof("cadvisor (stand-in, cAdvisor v0.61.0's manager) serving on %s", addr)
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveStats answers /api/v2.1/stats/<cgroup> as cAdvisor's v2.1 API does: a map from
// each container's name to its spec and its latest samples, in the v2 shape.
func serveStats(w http.ResponseWriter, r *http.Request, m manager.Manager) {
	name := strings.TrimPrefix(r.URL.Path, statsAPI)
	if name == "" {
		name = "/"
	}
	opt, err := requestOptions(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	infos, err := m.GetRequestedContainersInfo(name, opt)
	if err != nil && len(infos) == 0 {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out := make(map[string]v2.ContainerInfo, len(infos))
	for n, c := range infos {
		out[n] = v2.ContainerInfo{
			Spec:  v2.ContainerSpecFromV1(&c.Spec, c.Aliases, c.Namespace),
			Stats: v2.ContainerStatsFromV1(n, &c.Spec, c.Stats),
		}
	}
	writeJSON(w, out, nil)
}

// requestOptions reads the query of a v2.1 request, with cAdvisor's defaults (by name,
// 64 samples, not recursive). Only names are taken as identifiers: no docker factory
// runs here.
func requestOptions(r *http.Request) (model.RequestOptions, error) {
	opt := model.RequestOptions{IdType: "name", Count: 64}
	q := r.URL.Query()
	if t := q.Get("type"); t != "" && t != "name" {
		return opt, fmt.Errorf("type %q: only names are served", t)
	}
	if c := q.Get("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil {
			return opt, fmt.Errorf("count %q: %w", c, err)
		}
		opt.Count = n
	}
	if rec := q.Get("recursive"); rec != "" {
		b, err := strconv.ParseBool(rec)
		if err != nil {
			return opt, fmt.Errorf("recursive %q: %w", rec, err)
		}
		opt.Recursive = b
	}
	return opt, nil
}

// writeJSON writes v, or err as a 500.
func writeJSON(w http.ResponseWriter, v any, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		klog.Warningf("writing an answer: %v", err)
	}
}
