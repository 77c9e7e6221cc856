package server

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/storage"
)

// sentStream is a Stream* call's server stream that keeps what is sent, calling onSend
// (if set) as each chunk goes.
type sentStream[T any] struct {
	grpc.ServerStream
	ctx    context.Context
	onSend func()
	sent   []*T
}

func (s *sentStream[T]) Context() context.Context { return s.ctx }
func (s *sentStream[T]) Send(m *T) error {
	s.sent = append(s.sent, m)
	if s.onSend != nil {
		s.onSend()
	}
	return nil
}

// chunks cuts items as a chunker sends them, for TestChunks.
func chunks[T proto.Message](items []T, maxItems, maxBytes int) [][]T {
	var out [][]T
	c := &chunker[T, []T]{ctx: context.Background(), maxItems: maxItems, maxBytes: maxBytes,
		wrap: func(c []T) *[]T { return &c },
		send: func(c *[]T) error { out = append(out, *c); return nil }}
	for _, it := range items {
		if err := c.add(it); err != nil {
			panic(err)
		}
	}
	if err := c.flush(); err != nil {
		panic(err)
	}
	return out
}

// TestStreamSendsAsItReads is issue 51's item 7: a Stream* call sends each chunk as soon
// as it is full, before the item after it is read, not once the whole list is built.
func TestStreamSendsAsItReads(t *testing.T) {
	s := scaleServer(t)
	ss := &sentStream[runtimeapi.StreamPodSandboxesResponse]{ctx: context.Background()}
	var sentAfter []int // chunks sent once each item was handed over
	const items = 2*100 + 1
	err := streamList(s, "test", ss, func(ctx context.Context, emit func(*runtimeapi.PodSandbox) error) error {
		for i := range items {
			if err := emit(&runtimeapi.PodSandbox{Id: fmt.Sprint(i)}); err != nil {
				return err
			}
			sentAfter = append(sentAfter, len(ss.sent))
		}
		return nil
	}, func(c []*runtimeapi.PodSandbox) *runtimeapi.StreamPodSandboxesResponse {
		return &runtimeapi.StreamPodSandboxesResponse{PodSandboxes: c}
	}, ss.Send)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss.sent) != 3 {
		t.Fatalf("%d chunks sent, want 3", len(ss.sent))
	}
	// Item i (from 0) is in chunk i/100, which went as its 100th item was handed over.
	for i, got := range sentAfter {
		if want := (i + 1) / streamChunkItems; got != want {
			t.Fatalf("chunks sent once item %d was handed over: %d, want %d", i, got, want)
		}
	}
}

// countingImages is a store of n images (eachImage's imageWalker) that counts the images
// it has looked up.
type countingImages struct {
	n, read int
}

func (c *countingImages) ImageStatus(context.Context, string) (storage.Image, error) {
	return storage.Image{}, storage.ErrImageNotFound
}

func (c *countingImages) EachImage(ctx context.Context, fn func(storage.Image) error) error {
	for i := range c.n {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.read++
		if err := fn(storage.Image{ID: fmt.Sprintf("%064x", i)}); err != nil {
			return err
		}
	}
	return nil
}

// streamCall runs a Stream* call to its end on a sentStream and returns the items of
// each chunk sent.
func streamCall[R any](ctx context.Context, onSend func(), call func(*sentStream[R]) error, items func(*R) int) ([]int, error) {
	ss := &sentStream[R]{ctx: ctx, onSend: onSend}
	err := call(ss)
	var n []int
	for _, r := range ss.sent {
		n = append(n, items(r))
	}
	return n, err
}

// TestEachStreamReadsAsItSends is issue 51's item 7 for each Stream* call: over 10 pods
// (each with a container) or images, in chunks of 4, each call has read, when it sends a chunk, the
// items of the chunks sent so far and no more (each call's own trace of what it read:
// the List calls' decode caches, the CPU samples the stats keep, the images looked up);
// and a client that goes after the first chunk stops the reading at the next item.
func TestEachStreamReadsAsItSends(t *testing.T) {
	defer func(items int) { streamChunkItems = items }(streamChunkItems)
	streamChunkItems = 4 // 10 pods: 3 chunks
	const n = 10
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// stream runs the call on a server of n pods; read counts what it has read.
		stream func(e streamEnv, ctx context.Context, onSend func()) ([]int, error)
		read   func(e streamEnv) int
	}{
		{"StreamPodSandboxes", func(e streamEnv, ctx context.Context, onSend func()) ([]int, error) {
			return streamCall(ctx, onSend, func(ss *sentStream[runtimeapi.StreamPodSandboxesResponse]) error {
				return e.s.StreamPodSandboxes(&runtimeapi.StreamPodSandboxesRequest{}, ss)
			}, func(r *runtimeapi.StreamPodSandboxesResponse) int { return len(r.GetPodSandboxes()) })
		}, func(e streamEnv) int { return len(e.s.sandboxCache.entries) }},
		{"StreamContainers", func(e streamEnv, ctx context.Context, onSend func()) ([]int, error) {
			return streamCall(ctx, onSend, func(ss *sentStream[runtimeapi.StreamContainersResponse]) error {
				return e.s.StreamContainers(&runtimeapi.StreamContainersRequest{}, ss)
			}, func(r *runtimeapi.StreamContainersResponse) int { return len(r.GetContainers()) })
		}, func(e streamEnv) int { return len(e.s.containerCache.entries) }},
		{"StreamContainerStats", func(e streamEnv, ctx context.Context, onSend func()) ([]int, error) {
			return streamCall(ctx, onSend, func(ss *sentStream[runtimeapi.StreamContainerStatsResponse]) error {
				return e.s.StreamContainerStats(&runtimeapi.StreamContainerStatsRequest{}, ss)
			}, func(r *runtimeapi.StreamContainerStatsResponse) int { return len(r.GetContainerStats()) })
		}, streamEnv.containersSampled},
		{"StreamPodSandboxStats", func(e streamEnv, ctx context.Context, onSend func()) ([]int, error) {
			return streamCall(ctx, onSend, func(ss *sentStream[runtimeapi.StreamPodSandboxStatsResponse]) error {
				return e.s.StreamPodSandboxStats(&runtimeapi.StreamPodSandboxStatsRequest{}, ss)
			}, func(r *runtimeapi.StreamPodSandboxStatsResponse) int { return len(r.GetPodSandboxStats()) })
		}, streamEnv.containersSampled}, // one container a pod
		{"StreamPodSandboxMetrics", func(e streamEnv, ctx context.Context, onSend func()) ([]int, error) {
			return streamCall(ctx, onSend, func(ss *sentStream[runtimeapi.StreamPodSandboxMetricsResponse]) error {
				return e.s.StreamPodSandboxMetrics(&runtimeapi.StreamPodSandboxMetricsRequest{}, ss)
			}, func(r *runtimeapi.StreamPodSandboxMetricsResponse) int { return len(r.GetPodSandboxMetrics()) })
		}, func(e streamEnv) int { return len(e.s.sandboxCache.entries) }},
		// StreamImages is streamList over eachImage, here over a store that counts its
		// lookups (storage's TestEachImageLooksUpAsItGoes has the real store's).
		{"StreamImages", func(e streamEnv, ctx context.Context, onSend func()) ([]int, error) {
			return streamCall(ctx, onSend, func(ss *sentStream[runtimeapi.StreamImagesResponse]) error {
				return streamList(e.s, runtimeapi.ImageService_StreamImages_FullMethodName, ss,
					func(ctx context.Context, emit func(*runtimeapi.Image) error) error {
						return eachImage(ctx, e.imgs, nil, emit)
					},
					func(c []*runtimeapi.Image) *runtimeapi.StreamImagesResponse {
						return &runtimeapi.StreamImagesResponse{Images: c}
					}, ss.Send)
			}, func(r *runtimeapi.StreamImagesResponse) int { return len(r.GetImages()) })
		}, func(e streamEnv) int { return e.imgs.read }},
	} {
		env := func(t *testing.T) streamEnv {
			s := scaleServer(t)
			_, ctrs := populate(t, s, n)
			s.runtimes = fakeRuntimes{"runc": featuresRuntime(t, "runc", "{}")} // no cgroup known: zero stats
			return streamEnv{s: s, imgs: &countingImages{n: n}, ctrs: ctrs}
		}
		t.Run(tc.name, func(t *testing.T) {
			e := env(t)
			var readAtSend []int
			chunks, err := tc.stream(e, ctx, func() { readAtSend = append(readAtSend, tc.read(e)) })
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(chunks) != "[4 4 2]" {
				t.Fatalf("chunks of %v items, want [4 4 2]", chunks)
			}
			if fmt.Sprint(readAtSend) != "[4 8 10]" {
				t.Fatalf("items read as each chunk was sent: %v, want [4 8 10]", readAtSend)
			}
		})
		t.Run(tc.name+" client goes", func(t *testing.T) {
			e := env(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			chunks, err := tc.stream(e, ctx, cancel)
			if status.Code(err) != codes.Canceled || fmt.Sprint(chunks) != "[4]" {
				t.Fatalf("a client gone after the first chunk: %v, chunks of %v items; want Canceled after [4]", err, chunks)
			}
			if read := tc.read(e); read > streamChunkItems+1 {
				t.Fatalf("%d items read; want the walk stopped at the item after the first chunk", read)
			}
		})
	}
}

// streamEnv is TestEachStreamReadsAsItSends's server, with n pods of one container each
// (ctrs), and its store of n images.
type streamEnv struct {
	s    *Server
	imgs *countingImages
	ctrs []string
}

// containersSampled counts the containers whose CPU the stats calls have sampled.
func (e streamEnv) containersSampled() int {
	n := 0
	for _, id := range e.ctrs {
		if _, ok := e.s.stats.cpu[cpuKey{id: id}]; ok {
			n++
		}
	}
	return n
}

func TestChunks(t *testing.T) {
	item := func(n int) *runtimeapi.PodSandbox { return &runtimeapi.PodSandbox{Id: fmt.Sprintf("%0*d", n, 0)} }
	size := proto.Size(item(100)) // every item below is this size
	items := func(n int) []*runtimeapi.PodSandbox {
		var out []*runtimeapi.PodSandbox
		for range n {
			out = append(out, item(100))
		}
		return out
	}
	for _, tc := range []struct {
		name               string
		items              int
		maxItems, maxBytes int
		want               []int // items per chunk
	}{
		{"none", 0, 10, 1 << 20, nil},
		{"one", 1, 10, 1 << 20, []int{1}},
		{"exactly full", 10, 10, 1 << 20, []int{10}},
		{"by count", 25, 10, 1 << 20, []int{10, 10, 5}},
		{"by size", 7, 100, 3 * size, []int{3, 3, 1}},
		{"item larger than the budget goes alone", 3, 100, size / 2, []int{1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := chunks(items(tc.items), tc.maxItems, tc.maxBytes)
			var lens []int
			for _, c := range got {
				lens = append(lens, len(c))
			}
			if fmt.Sprint(lens) != fmt.Sprint(tc.want) {
				t.Fatalf("chunk sizes %v, want %v", lens, tc.want)
			}
		})
	}
}

// TestStreamsEqualLists checks that each Stream* call sends what its List* counterpart
// answers, in order, each item once, in chunks of at most streamChunkItems, with filters.
func TestStreamsEqualLists(t *testing.T) {
	s := scaleServer(t)
	podIDs, _ := populate(t, s, 250)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		filter *runtimeapi.PodSandboxFilter
		want   int
	}{
		{"all", nil, 250},
		{"by id", &runtimeapi.PodSandboxFilter{Id: podIDs[7]}, 1},
		{"by label, none", &runtimeapi.PodSandboxFilter{LabelSelector: map[string]string{"app": "db"}}, 0},
	} {
		t.Run("pods "+tc.name, func(t *testing.T) {
			list, err := s.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{Filter: tc.filter})
			if err != nil {
				t.Fatal(err)
			}
			ss := &sentStream[runtimeapi.StreamPodSandboxesResponse]{ctx: ctx}
			if err := s.StreamPodSandboxes(&runtimeapi.StreamPodSandboxesRequest{Filter: tc.filter}, ss); err != nil {
				t.Fatal(err)
			}
			var got []*runtimeapi.PodSandbox
			for _, r := range ss.sent {
				if n := len(r.GetPodSandboxes()); n == 0 || n > streamChunkItems {
					t.Fatalf("a chunk of %d items; want 1 to %d", n, streamChunkItems)
				}
				got = append(got, r.GetPodSandboxes()...)
			}
			if len(got) != tc.want || len(list.GetItems()) != tc.want {
				t.Fatalf("streamed %d, listed %d; want %d", len(got), len(list.GetItems()), tc.want)
			}
			if !proto.Equal(&runtimeapi.ListPodSandboxResponse{Items: got}, list) {
				t.Fatal("the streamed pods differ from the listed ones")
			}
			if wantChunks := (tc.want + streamChunkItems - 1) / streamChunkItems; len(ss.sent) != wantChunks {
				t.Fatalf("%d chunks, want %d", len(ss.sent), wantChunks)
			}
		})
	}
	t.Run("containers of a pod", func(t *testing.T) {
		f := &runtimeapi.ContainerFilter{PodSandboxId: podIDs[3]}
		list, err := s.ListContainers(ctx, &runtimeapi.ListContainersRequest{Filter: f})
		if err != nil {
			t.Fatal(err)
		}
		ss := &sentStream[runtimeapi.StreamContainersResponse]{ctx: ctx}
		if err := s.StreamContainers(&runtimeapi.StreamContainersRequest{Filter: f}, ss); err != nil {
			t.Fatal(err)
		}
		if len(ss.sent) != 1 || !proto.Equal(&runtimeapi.ListContainersResponse{Containers: ss.sent[0].GetContainers()}, list) || len(list.GetContainers()) != 1 {
			t.Fatalf("streamed %v, listed %v", ss.sent, list)
		}
	})
	t.Run("all containers", func(t *testing.T) {
		ss := &sentStream[runtimeapi.StreamContainersResponse]{ctx: ctx}
		if err := s.StreamContainers(&runtimeapi.StreamContainersRequest{}, ss); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range ss.sent {
			n += len(r.GetContainers())
		}
		if n != 250 || len(ss.sent) != 3 {
			t.Fatalf("streamed %d containers in %d chunks, want 250 in 3", n, len(ss.sent))
		}
	})
}

func TestStreamEndsWithTheClient(t *testing.T) {
	s := scaleServer(t)
	populate(t, s, 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ss := &sentStream[runtimeapi.StreamPodSandboxesResponse]{ctx: ctx}
	err := s.StreamPodSandboxes(&runtimeapi.StreamPodSandboxesRequest{}, ss)
	if status.Code(err) != codes.Canceled || len(ss.sent) != 0 {
		t.Fatalf("StreamPodSandboxes of a gone client = %v after %d chunks; want Canceled, none sent", err, len(ss.sent))
	}
}
