package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.Operation("/x", "OK", time.Millisecond)
	m.Stalled(journal.KindSandbox, "stage")
	m.CacheEvent(journal.KindSandbox, "cached")
	m.Recovered("cached", 1)
	if h := m.JournalHooks(); h.Committed != nil || h.Undone != nil || h.Expired != nil {
		t.Fatal("nil metrics gave journal hooks")
	}
}

func TestServeExposesWhatWasRecorded(t *testing.T) {
	records := []journal.Record{{Kind: journal.KindSandbox, State: journal.StateCached}, {Kind: journal.KindSandbox, State: journal.StateCached}}
	m := New(func() []journal.Record { return records })
	m.Operation("/runtime.v1.RuntimeService/RunPodSandbox", "DeadlineExceeded", 2*time.Second)
	m.Stalled(journal.KindSandbox, "sandbox network creation")
	m.CacheEvent(journal.KindContainer, "claimed")
	m.Recovered("rolled_back", 3)
	hooks := m.JournalHooks()
	hooks.Committed(3*time.Millisecond, 5)
	hooks.Undone("cni-attach", false, errors.New("x"))
	hooks.Undone("cni-attach", true, nil)
	hooks.Expired(journal.Record{Kind: journal.KindSandbox})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := m.Serve(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`crijournal_cri_operations_total{code="DeadlineExceeded",method="/runtime.v1.RuntimeService/RunPodSandbox"} 1`,
		`crijournal_resources_stalled_at_stage_total{kind="sandbox",stage="sandbox network creation"} 1`,
		`crijournal_resource_cache_events_total{event="claimed",kind="container"} 1`,
		`crijournal_resource_cache_events_total{event="expired",kind="sandbox"} 1`,
		`crijournal_recovery_records_total{outcome="rolled_back"} 3`,
		`crijournal_undos_total{attempt="first",result="failed",step="cni-attach"} 1`,
		`crijournal_undos_total{attempt="retry",result="ok",step="cni-attach"} 1`,
		`crijournal_journal_commit_duration_seconds_count 1`,
		`crijournal_journal_commit_writes_sum 5`,
		`crijournal_journal_records{kind="sandbox",state="cached"} 2`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
}
