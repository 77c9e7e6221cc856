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
)

// sentStream is a Stream* call's server stream that keeps what is sent.
type sentStream[T any] struct {
	grpc.ServerStream
	ctx  context.Context
	sent []*T
}

func (s *sentStream[T]) Context() context.Context { return s.ctx }
func (s *sentStream[T]) Send(m *T) error          { s.sent = append(s.sent, m); return nil }

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

// TestStreamSendsAsItReads is issue 51's item 7: a Stream* call sends each chunk once it
// is full, while the items after it are still being read, not once the whole list is
// built.
func TestStreamSendsAsItReads(t *testing.T) {
	s := scaleServer(t)
	ss := &sentStream[runtimeapi.StreamPodSandboxesResponse]{ctx: context.Background()}
	var sentAfter []int // chunks sent once each item was handed over
	err := streamList(s, "test", ss, func(ctx context.Context, emit func(*runtimeapi.PodSandbox) error) error {
		for i := range 2*streamChunkItems + 1 {
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
	// The first chunk went out as item streamChunkItems (the first of the second chunk)
	// was read, the second as the last item was, before the walk ended.
	if got := sentAfter[streamChunkItems-1]; got != 0 {
		t.Errorf("chunks sent once item %d was read: %d, want 0 (the chunk is not full)", streamChunkItems-1, got)
	}
	if got := sentAfter[streamChunkItems]; got != 1 {
		t.Errorf("chunks sent once item %d was read: %d, want 1", streamChunkItems, got)
	}
	if got := sentAfter[2*streamChunkItems]; got != 2 {
		t.Errorf("chunks sent once the last item was read: %d, want 2", got)
	}
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
