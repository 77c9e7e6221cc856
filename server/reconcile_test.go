package server

import (
	"context"
	"errors"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// TestReconcileRollsBackBrokenCachedSandbox: at recovery a cached sandbox that lost a
// namespace pin is rolled back, so its retry builds a new one instead of being handed a
// sandbox without its network; a sound cached sandbox is kept as it is.
func TestReconcileRollsBackBrokenCachedSandbox(t *testing.T) {
	tests := []struct {
		name       string
		namespaces map[string]string
		wantGone   bool
	}{
		{"pin gone", map[string]string{"net": "/nonexistent/crijournal-test/netns/x"}, true},
		{"host namespaces only: nothing to lose", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testServer(t)
			ctx := context.Background()
			r, err := s.journal.Begin(beginReq("pod", "fp"))
			if err != nil {
				t.Fatal(err)
			}
			cfg := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "n", Namespace: "d", Uid: "u"}}
			obj := sandboxObject{Config: mustMarshal(cfg), Namespaces: tt.namespaces, CreatedAt: time.Now()}
			cached, err := s.journal.Settle(r.ID, obj, false)
			if err != nil {
				t.Fatal(err)
			}
			changed, err := s.Reconcile(ctx, cached)
			if err != nil || changed != tt.wantGone {
				t.Fatalf("Reconcile = %v, %v; want changed %v", changed, err, tt.wantGone)
			}
			after, err := s.journal.Get(r.ID)
			if tt.wantGone {
				if !errors.Is(err, journal.ErrNotFound) {
					t.Fatalf("the broken cached sandbox is still there: %s, %v", after.State, err)
				}
				return
			}
			if err != nil || after.State != journal.StateCached || len(after.Markers) > 0 {
				t.Fatalf("the sound cached sandbox changed: %+v, %v", after, err)
			}
		})
	}
}
