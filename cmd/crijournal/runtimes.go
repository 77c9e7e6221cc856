package main

import (
	"fmt"
	"sync"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/oci"
)

// runtimeSet builds the OCI runtime of each configured handler on first use and keeps it.
type runtimeSet struct {
	cfg config.Config

	mu       sync.Mutex
	runtimes map[string]*oci.Runtime
}

func newRuntimeSet(cfg config.Config) *runtimeSet {
	return &runtimeSet{cfg: cfg, runtimes: map[string]*oci.Runtime{}}
}

// Runtime returns the runtime of a handler ("" means the default one).
func (s *runtimeSet) Runtime(handler string) (*oci.Runtime, error) {
	if handler == "" {
		handler = s.cfg.DefaultRuntime
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if rt, ok := s.runtimes[handler]; ok {
		return rt, nil
	}
	if _, ok := s.cfg.Runtimes[handler]; !ok {
		return nil, fmt.Errorf("runtime handler %q is not configured", handler)
	}
	rt, err := oci.New(oci.Config{
		Handler:          handler,
		Path:             s.cfg.RuntimePath(handler),
		Root:             s.cfg.RuntimeRoot(handler),
		ConmonPath:       s.cfg.ConmonPath,
		StateDir:         oci.StateDirFor(s.cfg.RunRoot, handler),
		ExecDrainTimeout: s.cfg.ExecDrainTimeout,
		SystemdCgroup:    s.cfg.CgroupManager == config.CgroupManagerSystemd,
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
	for handler := range s.cfg.Runtimes {
		if rt, err := s.Runtime(handler); err == nil {
			out = append(out, rt)
		}
	}
	return out
}
