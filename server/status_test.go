package server

import (
	"context"
	"fmt"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

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
