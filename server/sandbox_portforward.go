package server

import (
	"context"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PortForward validates a port-forward request (the sandbox exists and is ready) and
// returns the URL of its session; the ports are named when the client connects.
func (s *Server) PortForward(ctx context.Context, req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	sb, err := s.readySandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	for _, p := range req.GetPort() {
		if p <= 0 || p > 65535 {
			return nil, invalidf("port %d is not a TCP port", p)
		}
	}
	st := s.streams.Load()
	if st == nil {
		return nil, errNoStreams
	}
	req.PodSandboxId = sb.rec.ID
	return st.GetPortForward(req)
}
