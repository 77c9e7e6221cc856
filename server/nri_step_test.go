package server

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/nri"
)

// TestNRIStepWithoutPlugins: with NRI enabled and no plugin registered, a sandbox's NRI
// step costs no commit of its own: it is recorded done, riding on the next commit, and
// its undo still runs when the creation is rolled back.
func TestNRIStepWithoutPlugins(t *testing.T) {
	dir := t.TempDir()
	n, err := nri.New(nri.Options{Enable: true, Socket: filepath.Join(dir, "nri.sock"), PluginDir: filepath.Join(dir, "plugins")})
	if err != nil {
		t.Fatal(err)
	}
	reg := journal.NewRegistry()
	undone := 0
	reg.Register(nri.StepPod, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		undone++
		return nil
	})
	log := slog.New(slog.DiscardHandler)
	j, err := journal.Open(filepath.Join(dir, "journal.db"), journal.Options{Logger: log, CacheTTL: time.Minute, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	s := New(Deps{Journal: j, Log: log, NRI: n})
	defer s.Close()
	if err := n.Start(s.NRISource()); err != nil {
		t.Fatal(err)
	}
	defer n.Stop()

	c := beginFlow(t, s, context.Background(), "pod")
	before := j.Stats().Commits
	unblock := n.Block()
	err = s.nriSandboxStep(c, &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "pod"}}, sandboxObject{})
	unblock()
	if err != nil {
		t.Fatal(err)
	}
	if got := j.Stats().Commits - before; got != 0 {
		t.Errorf("%d commits for an NRI step with no plugin, want 0", got)
	}
	rec, _ := j.Get(c.ID())
	if len(rec.Steps) != 1 || rec.Steps[0].Kind != nri.StepPod || rec.Steps[0].Status != journal.StepDone {
		t.Fatalf("steps %+v, want the NRI step, done", rec.Steps)
	}
	_ = c.Fail("test", context.Canceled)
	if undone != 1 {
		t.Errorf("the NRI step's undo ran %d times at the rollback, want 1", undone)
	}
}
