package server

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The Stream* calls of CRI v1.37 (feature gate CRIListStreaming, KEP 5825): each answers
// with what its List* counterpart answers, the same items for the same filter, cut into
// chunks so that a node with many pods, containers or images stays under gRPC's message
// size limit. Each item is in exactly one chunk, a chunk holds at least one item (no
// items: no chunk), and the stream ends with EOF once every item was sent; the kubelet
// collects the whole stream before it uses any of it.

// Chunk bounds: a chunk is closed at streamChunkItems items or once its items' encoded
// size reaches streamChunkBytes, well under the 4 MiB a default gRPC client accepts (the
// kubelet accepts 16 MiB). An item larger than streamChunkBytes goes alone.
var (
	streamChunkItems = 100
	streamChunkBytes = 1 << 20
)

// chunks cuts items into consecutive chunks of at most maxItems items and, unless one
// item alone exceeds it, at most maxBytes encoded bytes.
func chunks[T proto.Message](items []T, maxItems, maxBytes int) [][]T {
	var out [][]T
	start, size := 0, 0
	for i, it := range items {
		n := proto.Size(it)
		if i > start && (i-start >= maxItems || size+n > maxBytes) {
			out = append(out, items[start:i])
			start, size = i, 0
		}
		size += n
	}
	if start < len(items) {
		out = append(out, items[start:])
	}
	return out
}

// streamList answers a Stream* call: the fail-stop refusal and the status codes of
// UnaryInterceptor (which streams do not pass), then list's items sent chunk by chunk,
// wrapped by wrap. A client that goes (its context ends) stops the sending.
func streamList[T proto.Message, R any](s *Server, method string, ss grpc.ServerStream, list func(context.Context) ([]T, error), wrap func([]T) *R, send func(*R) error) error {
	start := time.Now()
	err := func() error {
		if jerr := s.journal.Err(); jerr != nil {
			return newError(errUnavailable, "%v; the runtime is stopping and takes no more work", jerr)
		}
		ctx := ss.Context()
		items, err := list(ctx)
		if err != nil {
			return err
		}
		for _, c := range chunks(items, streamChunkItems, streamChunkBytes) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := send(wrap(c)); err != nil {
				return err
			}
		}
		return nil
	}()
	err = toStatus(err)
	s.metrics.Operation(method, status.Code(err).String(), time.Since(start))
	if err != nil {
		s.log.Debug("cri call failed", "method", method, "code", status.Code(err), "err", err, "took", time.Since(start))
		return err
	}
	s.log.Debug("cri call", "method", method, "took", time.Since(start))
	return nil
}

// StreamPodSandboxes streams what ListPodSandbox lists.
func (s *Server) StreamPodSandboxes(req *runtimeapi.StreamPodSandboxesRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxesResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamPodSandboxes_FullMethodName, ss,
		func(ctx context.Context) ([]*runtimeapi.PodSandbox, error) {
			resp, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: req.GetFilter()})
			return resp.GetItems(), err
		},
		func(c []*runtimeapi.PodSandbox) *runtimeapi.StreamPodSandboxesResponse {
			return &runtimeapi.StreamPodSandboxesResponse{PodSandboxes: c}
		}, ss.Send)
}

// StreamContainers streams what ListContainers lists.
func (s *Server) StreamContainers(req *runtimeapi.StreamContainersRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamContainers_FullMethodName, ss,
		func(ctx context.Context) ([]*runtimeapi.Container, error) {
			resp, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: req.GetFilter()})
			return resp.GetContainers(), err
		},
		func(c []*runtimeapi.Container) *runtimeapi.StreamContainersResponse {
			return &runtimeapi.StreamContainersResponse{Containers: c}
		}, ss.Send)
}

// StreamContainerStats streams what ListContainerStats reports.
func (s *Server) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamContainerStats_FullMethodName, ss,
		func(ctx context.Context) ([]*runtimeapi.ContainerStats, error) {
			resp, err := s.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: req.GetFilter()})
			return resp.GetStats(), err
		},
		func(c []*runtimeapi.ContainerStats) *runtimeapi.StreamContainerStatsResponse {
			return &runtimeapi.StreamContainerStatsResponse{ContainerStats: c}
		}, ss.Send)
}

// StreamPodSandboxStats streams what ListPodSandboxStats reports.
func (s *Server) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamPodSandboxStats_FullMethodName, ss,
		func(ctx context.Context) ([]*runtimeapi.PodSandboxStats, error) {
			resp, err := s.ListPodSandboxStats(ctx, &runtimeapi.ListPodSandboxStatsRequest{Filter: req.GetFilter()})
			return resp.GetStats(), err
		},
		func(c []*runtimeapi.PodSandboxStats) *runtimeapi.StreamPodSandboxStatsResponse {
			return &runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: c}
		}, ss.Send)
}

// StreamPodSandboxMetrics streams what ListPodSandboxMetrics reports.
func (s *Server) StreamPodSandboxMetrics(req *runtimeapi.StreamPodSandboxMetricsRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamPodSandboxMetrics_FullMethodName, ss,
		func(ctx context.Context) ([]*runtimeapi.PodSandboxMetrics, error) {
			resp, err := s.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
			return resp.GetPodMetrics(), err
		},
		func(c []*runtimeapi.PodSandboxMetrics) *runtimeapi.StreamPodSandboxMetricsResponse {
			return &runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: c}
		}, ss.Send)
}

// StreamImages streams what ListImages lists.
func (i *imageService) StreamImages(req *runtimeapi.StreamImagesRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	return streamList(i.s, runtimeapi.ImageService_StreamImages_FullMethodName, ss,
		func(ctx context.Context) ([]*runtimeapi.Image, error) {
			resp, err := i.ListImages(ctx, &runtimeapi.ListImagesRequest{Filter: req.GetFilter()})
			return resp.GetImages(), err
		},
		func(c []*runtimeapi.Image) *runtimeapi.StreamImagesResponse {
			return &runtimeapi.StreamImagesResponse{Images: c}
		}, ss.Send)
}
