package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/oci"
)

// runtimeSet builds the OCI runtime of each configured handler on first use and keeps it.
type runtimeSet struct {
	cfg      config.Config
	handlers oci.Handlers
	logMax   int64 // conmon's --log-size-max (see logSizeMax); 0: none

	mu       sync.Mutex
	runtimes map[string]*oci.Runtime
}

// newRuntimeSet returns the runtimes of cfg's handlers, whose conmons bound containers'
// logs to logMax bytes (0: no bound).
func newRuntimeSet(cfg config.Config, logMax int64) *runtimeSet {
	return &runtimeSet{cfg: cfg, handlers: oci.NewHandlers(cfg.DefaultRuntime, maps.Keys(cfg.Runtimes)), logMax: logMax,
		runtimes: map[string]*oci.Runtime{}}
}

// Runtime returns the runtime of a handler ("" means the default one).
func (s *runtimeSet) Runtime(handler string) (*oci.Runtime, error) {
	handler, err := s.handlers.Lookup(handler)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rt, ok := s.runtimes[handler]; ok {
		return rt, nil
	}
	rt, err := oci.New(oci.Config{
		Handler:          handler,
		Path:             s.cfg.RuntimePath(handler),
		Root:             s.cfg.Layout().RuntimeRoot(handler),
		ConmonPath:       s.cfg.ConmonPath,
		StateDir:         s.cfg.Layout().ConmonState(handler).Dir(),
		ExecDrainTimeout: s.cfg.ExecDrainTimeout,
		LogSizeMax:       s.logMax,
		SystemdCgroup:    s.cfg.SystemdCgroup(),
	})
	if err != nil {
		return nil, err
	}
	s.runtimes[handler] = rt
	return rt, nil
}

// all returns the runtimes of every configured handler that can be built.
func (s *runtimeSet) all() []*oci.Runtime {
	var out []*oci.Runtime
	for _, handler := range s.handlers.Names() {
		if rt, err := s.Runtime(handler); err == nil {
			out = append(out, rt)
		}
	}
	return out
}

// checkRuntimeVersions asks the runtime of every handler its version (oci.Runtime.Version)
// and warns, once per handler, of a runc without the fixes of runc's known container
// breakouts or one that does not say its release. With refuse_vulnerable_runtime set it
// returns an error naming them instead, and the daemon does not start. A handler whose
// runtime cannot be built is left to fail where it is used, as before; one that is not
// runc (crun) is noted, not judged.
func checkRuntimeVersions(ctx context.Context, cfg config.Config, runtimes *runtimeSet, log *slog.Logger) error {
	var refused []string
	for _, handler := range slices.Sorted(maps.Keys(cfg.Runtimes)) {
		rt, err := runtimes.Runtime(handler)
		if err != nil {
			continue
		}
		v, err := rt.Version(ctx)
		attrs := []any{"handler", handler, "path", v.Path, "version", v.Version, "cves", v.CVEs, "fix", fixHint(cfg, handler, v)}
		switch v.Verdict {
		case oci.VerdictFixed:
			log.Debug("runtime version", "handler", handler, "path", v.Path, "version", v.Version)
			continue
		case oci.VerdictNotRunc:
			log.Info("runtime is not runc: runc's container breakout fixes are not checked for it; see its own advisories",
				"handler", handler, "path", v.Path, "runtime", v.Name, "version", v.Version)
			continue
		case oci.VerdictVulnerable:
			log.Warn("runtime is a runc without the fixes of known container breakouts", attrs...)
		default:
			if err != nil {
				attrs = append(attrs, "err", err)
			}
			log.Warn("runtime does not say which runc release it is: it may lack the fixes of known container breakouts", attrs...)
		}
		refused = append(refused, fmt.Sprintf("handler %s: %s (%s) is %s for %s; %s",
			handler, v.Path, cmp.Or(v.Version, "no version"), v.Verdict, strings.Join(v.CVEs, ", "), fixHint(cfg, handler, v)))
	}
	if cfg.RefuseVulnerableRuntime && len(refused) > 0 {
		return fmt.Errorf("refuse_vulnerable_runtime is set: %s", strings.Join(refused, "; "))
	}
	return nil
}

// fixHint says how to give handler a runc with the fixes v lacks: the project's runc
// (`make deps` installs it where handlers without a path find it), or a runc release
// that has them.
func fixHint(cfg config.Config, handler string, v oci.RuntimeVersion) string {
	if v.Verdict == oci.VerdictFixed || v.Verdict == oci.VerdictNotRunc {
		return ""
	}
	if cfg.Runtimes[handler].Path == "" {
		return fmt.Sprintf("run `make deps`, which installs the project's runc at %s (used by handlers without a path, instead of runc from PATH), or install %s",
			config.BundledRunc, v.Fix)
	}
	return fmt.Sprintf("set runtimes.%s.path to %s, or leave it empty for the project's runc (`make deps` installs it at %s)",
		handler, v.Fix, config.BundledRunc)
}

// logSizeMax returns the --log-size-max conmon gets (0: none) for log_size_max, which
// depends on whether conmon starts its count again when the kubelet's rotation reopens a
// log (see config.Config.LogSizeMax): 0 (automatic) is config.AutoLogSizeMax with such a
// conmon and no bound with an older one, which is said once; a bound set with an older
// conmon is kept, with a warning.
func logSizeMax(ctx context.Context, cfg config.Config, log *slog.Logger) int64 {
	if cfg.LogSizeMax < 0 {
		return 0
	}
	version, resets, err := oci.ConmonResetsLogCount(ctx, cfg.ConmonPath)
	if resets {
		return cmp.Or(cfg.LogSizeMax, config.AutoLogSizeMax)
	}
	attrs := []any{"conmon_version", version}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	if cfg.LogSizeMax == 0 {
		log.Info("containers' logs are not bounded: this conmon does not start its count of --log-size-max again when the kubelet rotates a log, "+
			"so a bound would truncate logs the kubelet has not rotated yet; with conmon 2.1.10 or later, log_size_max = 0 bounds them to 1 GiB",
			attrs...)
		return 0
	}
	log.Warn("log_size_max is set, but this conmon does not start its count again when the kubelet rotates a log: under a kubelet, each time "+
		"a container has written log_size_max in all, conmon truncates the log the kubelet has not rotated yet; use conmon 2.1.10 or later, or log_size_max = -1",
		append(attrs, "log_size_max", cfg.LogSizeMax)...)
	return cfg.LogSizeMax
}
