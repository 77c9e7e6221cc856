package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/bench"
	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
)

type networkSource struct{ err error }

func (n networkSource) Network() (*netns.Network, error) { return nil, n.err }

func TestStatusReportsNetworkReadiness(t *testing.T) {
	for _, tt := range []struct {
		name  string
		err   error
		ready bool
	}{
		{"network configured", nil, true},
		{"no network", fmt.Errorf("load /etc/cni/net.d: %w", netns.ErrNoNetwork), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := testServer(t)
			s.networks = networkSource{err: tt.err}
			resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{})
			if err != nil {
				t.Fatal(err)
			}
			conds := map[string]*runtimeapi.RuntimeCondition{}
			for _, c := range resp.GetStatus().GetConditions() {
				conds[c.GetType()] = c
			}
			if !conds[runtimeapi.RuntimeReady].GetStatus() {
				t.Error("RuntimeReady is false")
			}
			net := conds[runtimeapi.NetworkReady]
			if net.GetStatus() != tt.ready || (!tt.ready && (net.GetReason() != "NetworkPluginNotReady" || net.GetMessage() == "")) {
				t.Errorf("NetworkReady = %+v, want status %v with a reason when false", net, tt.ready)
			}
		})
	}
}

// TestVerboseStatusCountsPendingRemovals: a verbose Status says, under
// StatusInfoPendingRemovals, how many removals answered with work left (a deferred undo
// that has not run yet): 1 while one waits, 0 once it has run. The bench and the e2e
// harness wait for 0 under that key, which the bench, not linking the daemon, spells
// again (bench.PendingRemovalsInfo).
func TestVerboseStatusCountsPendingRemovals(t *testing.T) {
	if bench.PendingRemovalsInfo != StatusInfoPendingRemovals {
		t.Fatalf("the bench waits for %q, the daemon says %q", bench.PendingRemovalsInfo, StatusInfoPendingRemovals)
	}
	const deferredKind journal.StepKind = "test-deferred"
	release := make(chan struct{})
	reg := journal.NewRegistry()
	reg.RegisterDeferred(deferredKind, func(ctx context.Context, _ journal.Record, _ journal.Step) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	log := slog.New(slog.DiscardHandler)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{Logger: log, CacheTTL: time.Minute, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	mctx, stop := context.WithCancel(context.Background())
	maintained := make(chan struct{})
	go func() { defer close(maintained); j.Maintain(mctx, time.Hour) }()
	t.Cleanup(func() { stop(); <-maintained })
	s := &Server{journal: j, log: log, networks: networkSource{}, cfg: config.Default()}

	pending := func() string {
		t.Helper()
		resp, err := s.Status(context.Background(), &runtimeapi.StatusRequest{Verbose: true})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetInfo()[StatusInfoPendingRemovals]
	}
	if n := pending(); n != "0" {
		t.Fatalf("pending removals on an empty node %q, want \"0\"", n)
	}
	rec, err := j.Begin(journal.BeginRequest{Kind: journal.KindContainer, Name: "c", Fingerprint: "fp"})
	if err != nil {
		t.Fatal(err)
	}
	seq, err := j.Intents(rec.ID, journal.Intended{Stage: "making it", Kind: deferredKind})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Done(rec.ID, seq); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Settle(rec.ID, map[string]string{}, true); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, time.Millisecond, testenv.Until("Maintain's first look", func() bool { return j.Stats().MaintainPasses > 0 }))
	if err := j.Remove(context.Background(), rec.ID); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != "1" {
		t.Errorf("pending removals while the deferred undo waits %q, want \"1\"", n)
	}
	close(release)
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if n := pending(); n != "0" {
			return fmt.Errorf("pending removals %q after the deferred undo ran, want \"0\"", n)
		}
		return nil
	})
}
