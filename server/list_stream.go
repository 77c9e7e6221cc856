package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/storage"
)

// The Stream* calls of CRI v1.37 (feature gate CRIListStreaming, KEP 5825): each answers
// with what its List* counterpart answers, the same items for the same filter, cut into
// chunks so that a node with many pods, containers or images stays under gRPC's message
// size limit. Each chunk is sent as soon as it is full, before the next item is read
// (the List* calls' each* walks, and the store's image walk for StreamImages), so
// neither the list nor the time to read it all is held before the first chunk goes: what
// is held is the chunk being filled, and the index the walk goes through (the journal's
// records, which it keeps in memory anyway; the store's image records). Each item is in
// exactly one chunk, a chunk holds at least one item (no items: no chunk), and the
// stream ends with EOF once every item was sent; the kubelet collects the whole stream
// before it uses any of it. A client that goes stops the walk at its next item.

// Chunk bounds: a chunk is closed at streamChunkItems items or once its items' encoded
// size reaches streamChunkBytes, well under the 4 MiB a default gRPC client accepts (the
// kubelet accepts 16 MiB). An item larger than streamChunkBytes goes alone.
var (
	streamChunkItems = 100
	streamChunkBytes = 1 << 20
)

// chunker sends items in chunks as they are added: a chunk goes out as soon as it holds
// maxItems items or maxBytes encoded bytes, before the next item is read, or before an
// item that would take it past maxBytes (an item larger than that goes alone); flush
// sends the rest. Only the chunk being filled is held, never the whole list. A client
// that went (its context ended) stops it at the next item.
type chunker[T proto.Message, R any] struct {
	ctx                context.Context
	maxItems, maxBytes int
	wrap               func([]T) *R
	send               func(*R) error

	items []T
	size  int
}

// add adds one item, sending the chunk before it when the item does not fit, and the
// chunk with it when that fills it.
func (c *chunker[T, R]) add(it T) error {
	if err := c.ctx.Err(); err != nil {
		return err
	}
	n := proto.Size(it)
	if len(c.items) > 0 && c.size+n > c.maxBytes {
		if err := c.flush(); err != nil {
			return err
		}
	}
	c.items = append(c.items, it)
	c.size += n
	if len(c.items) >= c.maxItems || c.size >= c.maxBytes {
		return c.flush()
	}
	return nil
}

// flush sends the chunk being filled, if it holds anything; a client that went (its
// context ended) stops the sending.
func (c *chunker[T, R]) flush() error {
	if len(c.items) == 0 {
		return nil
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	err := c.send(c.wrap(c.items))
	c.items, c.size = nil, 0
	return err
}

// streamList answers a Stream* call: the fail-stop refusal and the status codes of
// UnaryInterceptor (which streams do not pass), then the items each hands over, sent
// chunk by chunk as they come (a chunker), wrapped by wrap. A client that goes (its
// context ends) stops the sending.
func streamList[T proto.Message, R any](s *Server, method string, ss grpc.ServerStream, each func(ctx context.Context, emit func(T) error) error, wrap func([]T) *R, send func(*R) error) error {
	start := time.Now()
	err := func() error {
		if jerr := s.journal.Err(); jerr != nil {
			return newError(errUnavailable, "%v; the runtime is stopping and takes no more work", jerr)
		}
		c := &chunker[T, R]{ctx: ss.Context(), maxItems: streamChunkItems, maxBytes: streamChunkBytes, wrap: wrap, send: send}
		if err := each(ss.Context(), c.add); err != nil {
			return err
		}
		return c.flush()
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
		func(ctx context.Context, emit func(*runtimeapi.PodSandbox) error) error {
			return s.eachPodSandbox(req.GetFilter(), emit)
		},
		func(c []*runtimeapi.PodSandbox) *runtimeapi.StreamPodSandboxesResponse {
			return &runtimeapi.StreamPodSandboxesResponse{PodSandboxes: c}
		}, ss.Send)
}

// StreamContainers streams what ListContainers lists.
func (s *Server) StreamContainers(req *runtimeapi.StreamContainersRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamContainersResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamContainers_FullMethodName, ss,
		func(ctx context.Context, emit func(*runtimeapi.Container) error) error {
			return s.eachContainer(req.GetFilter(), emit)
		},
		func(c []*runtimeapi.Container) *runtimeapi.StreamContainersResponse {
			return &runtimeapi.StreamContainersResponse{Containers: c}
		}, ss.Send)
}

// StreamContainerStats streams what ListContainerStats reports.
func (s *Server) StreamContainerStats(req *runtimeapi.StreamContainerStatsRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamContainerStatsResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamContainerStats_FullMethodName, ss,
		func(ctx context.Context, emit func(*runtimeapi.ContainerStats) error) error {
			return s.eachContainerStats(ctx, req.GetFilter(), emit)
		},
		func(c []*runtimeapi.ContainerStats) *runtimeapi.StreamContainerStatsResponse {
			return &runtimeapi.StreamContainerStatsResponse{ContainerStats: c}
		}, ss.Send)
}

// StreamPodSandboxStats streams what ListPodSandboxStats reports.
func (s *Server) StreamPodSandboxStats(req *runtimeapi.StreamPodSandboxStatsRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxStatsResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamPodSandboxStats_FullMethodName, ss,
		func(ctx context.Context, emit func(*runtimeapi.PodSandboxStats) error) error {
			return s.eachPodSandboxStats(ctx, req.GetFilter(), emit)
		},
		func(c []*runtimeapi.PodSandboxStats) *runtimeapi.StreamPodSandboxStatsResponse {
			return &runtimeapi.StreamPodSandboxStatsResponse{PodSandboxStats: c}
		}, ss.Send)
}

// StreamPodSandboxMetrics streams what ListPodSandboxMetrics reports.
func (s *Server) StreamPodSandboxMetrics(req *runtimeapi.StreamPodSandboxMetricsRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamPodSandboxMetricsResponse]) error {
	return streamList(s, runtimeapi.RuntimeService_StreamPodSandboxMetrics_FullMethodName, ss,
		func(ctx context.Context, emit func(*runtimeapi.PodSandboxMetrics) error) error {
			return s.eachPodSandboxMetrics(ctx, emit)
		},
		func(c []*runtimeapi.PodSandboxMetrics) *runtimeapi.StreamPodSandboxMetricsResponse {
			return &runtimeapi.StreamPodSandboxMetricsResponse{PodSandboxMetrics: c}
		}, ss.Send)
}

// StreamImages streams what ListImages lists, each image looked up in the store as it
// goes (eachImage).
func (i *imageService) StreamImages(req *runtimeapi.StreamImagesRequest, ss grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	return streamList(i.s, runtimeapi.ImageService_StreamImages_FullMethodName, ss,
		func(ctx context.Context, emit func(*runtimeapi.Image) error) error {
			st, err := i.store()
			if err != nil {
				return err
			}
			return eachImage(ctx, st, req.GetFilter(), emit)
		},
		func(c []*runtimeapi.Image) *runtimeapi.StreamImagesResponse {
			return &runtimeapi.StreamImagesResponse{Images: c}
		}, ss.Send)
}

// imageWalker is what eachImage reads images through: the store (*storage.Store).
type imageWalker interface {
	ImageStatus(ctx context.Context, ref string) (storage.Image, error)
	EachImage(ctx context.Context, fn func(storage.Image) error) error
}

// eachImage hands emit, in turn, the images that pass the filter (the one its reference
// names, or every image), each as the store looks it up (EachImage); an error from emit
// stops it.
func eachImage(ctx context.Context, st imageWalker, f *runtimeapi.ImageFilter, emit func(*runtimeapi.Image) error) error {
	if ref := f.GetImage().GetImage(); ref != "" {
		img, err := st.ImageStatus(ctx, ref)
		if errors.Is(err, storage.ErrImageNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return emit(toCRIImage(img))
	}
	return st.EachImage(ctx, func(img storage.Image) error { return emit(toCRIImage(img)) })
}
