package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
)

const (
	evCreated = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT
	evStarted = runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT
	evStopped = runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT
	evDeleted = runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT
)

// eventPod makes a created sandbox (pod i) with a decodable object.
func eventPod(t *testing.T, s *Server, i int) string {
	t.Helper()
	return benchCreate(t, s, journal.KindSandbox, fmt.Sprintf("pod-%d", i), "", sandboxObject{
		Config: mustMarshal(benchPodConfig(i)), RuntimeHandler: "runc", IPs: []string{"10.88.0.2"}, CreatedAt: time.Now(),
	})
}

// eventContainer makes a created container of a sandbox, with a decodable object.
func eventContainer(t *testing.T, s *Server, podID, name string) string {
	t.Helper()
	return benchCreate(t, s, journal.KindContainer, name, podID, containerObject{
		Config: mustMarshal(benchContainerConfig()), SandboxID: podID, Handler: "runc", CreatedAt: time.Now(),
	})
}

// seen is one event as a test compares it.
type seen struct {
	id   string
	kind runtimeapi.ContainerEventType
}

// next reads n events from a subscription, failing the test after a while.
func next(t *testing.T, sub *eventSub, n int) ([]seen, []*runtimeapi.ContainerEventResponse) {
	t.Helper()
	var out []seen
	var raw []*runtimeapi.ContainerEventResponse
	for len(out) < n {
		select {
		case ev, ok := <-sub.c:
			if !ok {
				t.Fatalf("subscription closed after %v", out)
			}
			out, raw = append(out, seen{ev.ContainerId, ev.ContainerEventType}), append(raw, ev)
		case <-time.After(10 * time.Second):
			t.Fatalf("got %v, waiting for %d events", out, n)
		}
	}
	return out, raw
}

func subscribe(t *testing.T, s *Server) *eventSub {
	t.Helper()
	sub, err := s.events.subscribe(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.events.unsubscribe(sub) })
	return sub
}

// TestEventsFollowTheLifecycle: a sandbox and its container send their events in their
// lifecycles' order, each after the commit that makes it true, with the pod's sandbox
// status (its metadata, which the kubelet reads) and the statuses of its containers.
func TestEventsFollowTheLifecycle(t *testing.T) {
	s := flowServer(t)
	sub := subscribe(t, s)
	pod := eventPod(t, s, 1)
	ctr := eventContainer(t, s, pod, "web")
	if err := s.journal.SetMarker(ctr, markerStartedAt, nowMarker()); err != nil {
		t.Fatal(err)
	}
	got, raw := next(t, sub, 4)
	want := []seen{{pod, evCreated}, {pod, evStarted}, {ctr, evCreated}, {ctr, evStarted}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	last := raw[3]
	if uid := last.GetPodSandboxStatus().GetMetadata().GetUid(); uid != benchPodConfig(1).GetMetadata().GetUid() {
		t.Errorf("the event's sandbox uid = %q, want the pod's", uid)
	}
	if cs := last.GetContainersStatuses(); len(cs) != 1 || cs[0].GetId() != ctr || cs[0].GetState() != runtimeapi.ContainerState_CONTAINER_RUNNING {
		t.Errorf("the event's container statuses = %v, want the running container", cs)
	}
	if last.GetCreatedAt() <= 0 {
		t.Errorf("created_at = %d", last.GetCreatedAt())
	}

	// It exits by itself (the exit marker commit), then is removed; then the sandbox
	// stops and is removed.
	if err := s.journal.SetMarkers(ctr, map[string]*string{markerFinishedAt: nowMarker(), markerExitCode: stringPtr("0")}); err != nil {
		t.Fatal(err)
	}
	if got, _ := next(t, sub, 1); got[0] != (seen{ctr, evStopped}) {
		t.Fatalf("after the exit: %v, want STOPPED", got)
	}
	if err := s.journal.Remove(context.Background(), ctr); err != nil {
		t.Fatal(err)
	}
	if got, raw := next(t, sub, 1); got[0] != (seen{ctr, evDeleted}) || len(raw[0].GetContainersStatuses()) != 0 {
		t.Fatalf("after the removal: %v with %d statuses, want DELETED and none", got, len(raw[0].GetContainersStatuses()))
	}
	if err := s.journal.SetMarker(pod, markerStopped, nowMarker()); err != nil {
		t.Fatal(err)
	}
	if err := s.journal.Remove(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	got, raw = next(t, sub, 2)
	if want := []seen{{pod, evStopped}, {pod, evDeleted}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
	if raw[1].GetPodSandboxStatus().GetMetadata() == nil {
		t.Error("a deleted sandbox's event has no status: want its last one")
	}
}

// TestNoEventForWhatCouldRollBack: a creation that fails and is rolled back sends
// nothing, nor does one cached because its request ended; the cached one's claim is its
// creation for the kubelet, and sends CREATED.
func TestNoEventForWhatCouldRollBack(t *testing.T) {
	s := flowServer(t)
	sub := subscribe(t, s)

	failed := beginFlow(t, s, context.Background(), "failed")
	if _, err := creation.Step(failed, long, fakeStep(fakeFirst, "first", fails(errors.New("boom")))); err == nil {
		t.Fatal("the failing step succeeded")
	}

	ended, cancel := context.WithCancel(context.Background())
	late := beginFlow(t, s, ended, "late")
	if _, err := creation.Step(late, long, fakeStep(fakeFirst, "first", returns(1))); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := late.Finish(sandboxObject{Config: mustMarshal(benchPodConfig(2))}); err == nil {
		t.Fatal("a creation whose request ended was answered")
	}
	// A barrier: an event after everything above.
	barrier := eventPod(t, s, 3)
	if got, _ := next(t, sub, 1); got[0] != (seen{barrier, evCreated}) {
		t.Fatalf("first event = %v, want the barrier's CREATED: the rolled-back or cached creation was announced", got)
	}
	next(t, sub, 1) // the barrier's STARTED

	rec, err := s.journal.Claim(journal.ClaimRequest{Kind: journal.KindSandbox, Name: "late", Fingerprint: "fp"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := next(t, sub, 2); got[0] != (seen{rec.ID, evCreated}) || got[1] != (seen{rec.ID, evStarted}) {
		t.Fatalf("after the claim: %v, want its CREATED and STARTED", got)
	}
}

// TestTransitionsOfCoalescedChanges: changes published between two looks come in one,
// and the events still follow each lifecycle: a record first seen started gets CREATED
// then STARTED; one removed while running gets STOPPED then DELETED, containers before
// their sandbox.
func TestTransitionsOfCoalescedChanges(t *testing.T) {
	started := map[string]string{markerStartedAt: "x"}
	sb := journal.Record{ID: "sb", Kind: journal.KindSandbox, State: journal.StateCreated}
	c1 := journal.Record{ID: "c1", Kind: journal.KindContainer, Parent: "sb", State: journal.StateCreated, Markers: started}
	c2 := journal.Record{ID: "c2", Kind: journal.KindContainer, Parent: "sb", State: journal.StateCreated}
	tests := []struct {
		name          string
		before, after []journal.Record
		want          []seen
	}{
		{"nothing", []journal.Record{sb}, []journal.Record{sb}, nil},
		{"a pod made and started at once", nil, []journal.Record{sb, c1, c2},
			[]seen{{"sb", evCreated}, {"sb", evStarted}, {"c1", evCreated}, {"c1", evStarted}, {"c2", evCreated}}},
		{"a pod removed at once", []journal.Record{sb, c1, c2}, nil,
			[]seen{{"c2", evDeleted}, {"c1", evStopped}, {"c1", evDeleted}, {"sb", evStopped}, {"sb", evDeleted}}},
		{"a container exits", []journal.Record{sb, c1}, []journal.Record{sb, withMarker(c1, markerFinishedAt)},
			[]seen{{"c1", evStopped}}},
		{"a container stopped before it started", []journal.Record{sb, c2}, []journal.Record{sb, withMarker(c2, markerFinishedAt)},
			[]seen{{"c2", evStopped}}},
		{"a start recorded after the exit", []journal.Record{sb, withMarker(c2, markerFinishedAt)},
			[]journal.Record{sb, withMarker(withMarker(c2, markerFinishedAt), markerStartedAt)}, nil},
		{"a sandbox's pause exits", []journal.Record{sb}, []journal.Record{withMarker(sb, markerPauseExited)},
			[]seen{{"sb", evStopped}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []seen
			for _, tr := range transitions(viewOf(tt.before), viewOf(tt.after)) {
				got = append(got, seen{tr.l.rec.ID, tr.kind})
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("transitions = %v, want %v", got, tt.want)
			}
		})
	}
}

func withMarker(r journal.Record, key string) journal.Record {
	m := map[string]string{key: "x"}
	for k, v := range r.Markers {
		m[k] = v
	}
	r.Markers = m
	return r
}

// TestEventBufferIsBounded: a subscriber that does not read keeps eventBuffer events and
// loses the rest, without holding up the sender or the other subscribers; once it reads
// again it gets new ones.
func TestEventBufferIsBounded(t *testing.T) {
	s := flowServer(t) // nothing changes in the journal: the feed's goroutine sends nothing
	slow, fast := subscribe(t, s), subscribe(t, s)
	batch := func(n int) []*runtimeapi.ContainerEventResponse {
		out := make([]*runtimeapi.ContainerEventResponse, n)
		for i := range out {
			out[i] = &runtimeapi.ContainerEventResponse{ContainerId: fmt.Sprint(i)}
		}
		return out
	}
	s.events.send(s.log, batch(eventBuffer+10)) // returns: nobody reads
	for name, sub := range map[string]*eventSub{"slow": slow, "fast": fast} {
		if len(sub.c) != eventBuffer || sub.dropped != 10 {
			t.Fatalf("%s subscriber: %d buffered, %d dropped; want %d and 10", name, len(sub.c), sub.dropped, eventBuffer)
		}
	}
	if first := <-fast.c; first.ContainerId != "0" {
		t.Fatalf("the first event kept is %s, want the oldest", first.ContainerId)
	}
	for range eventBuffer - 1 { // the fast one reads the rest
		<-fast.c
	}
	s.events.send(s.log, batch(1))
	if len(fast.c) != 1 || fast.dropped != 0 {
		t.Errorf("fast subscriber after reading: %d buffered, %d dropped; want the new event delivered", len(fast.c), fast.dropped)
	}
	if len(slow.c) != eventBuffer || slow.dropped != 11 {
		t.Errorf("slow subscriber: %d buffered, %d dropped; want %d and 11", len(slow.c), slow.dropped, eventBuffer)
	}
}

// fakeEventStream is the server side of a GetContainerEvents stream.
type fakeEventStream struct {
	grpc.ServerStream
	ctx  context.Context
	sent chan *runtimeapi.ContainerEventResponse
}

func (f *fakeEventStream) Context() context.Context { return f.ctx }

func (f *fakeEventStream) SendHeader(metadata.MD) error { return nil }

func (f *fakeEventStream) Send(ev *runtimeapi.ContainerEventResponse) error {
	f.sent <- ev
	return nil
}

// TestEventStreamEnds: a stream ends when its client goes, and when the server stops
// the events (with Unavailable); later subscriptions are refused.
func TestEventStreamEnds(t *testing.T) {
	s := flowServer(t)
	serve := func(ctx context.Context) (*fakeEventStream, chan error) {
		st := &fakeEventStream{ctx: ctx, sent: make(chan *runtimeapi.ContainerEventResponse, 10)}
		ended := make(chan error, 1)
		go func() { ended <- s.GetContainerEvents(&runtimeapi.GetEventsRequest{}, st) }()
		return st, ended
	}
	ctx, leave := context.WithCancel(context.Background())
	st, ended := serve(ctx)
	// Once subscribed, it gets the events of what is made.
	for !s.events.subscribed() {
		time.Sleep(time.Millisecond)
	}
	pod := eventPod(t, s, 1)
	if ev := <-st.sent; ev.ContainerId != pod || ev.ContainerEventType != evCreated {
		t.Fatalf("first event = %v, want the pod's CREATED", ev)
	}
	leave()
	if err := <-ended; err != nil {
		t.Errorf("the client went: %v, want nil", err)
	}

	_, ended = serve(context.Background())
	for !s.events.subscribed() {
		time.Sleep(time.Millisecond)
	}
	s.StopEvents()
	if err := <-ended; status.Code(err) != codes.Unavailable {
		t.Errorf("the server stopped: %v, want Unavailable", err)
	}
	if _, ended = serve(context.Background()); status.Code(<-ended) != codes.Unavailable {
		t.Error("a subscription after the stop was not refused with Unavailable")
	}
}

// TestPodSandboxStatusTimestampWithStatuses: timestamp and containers_statuses come
// together (the kubelet's Evented PLEG takes a timestamp to mean the statuses are the
// whole pod), or not at all when a container cannot be read.
func TestPodSandboxStatusTimestampWithStatuses(t *testing.T) {
	s := flowServer(t)
	pod := eventPod(t, s, 1)
	ask := func() *runtimeapi.PodSandboxStatusResponse {
		t.Helper()
		resp, err := s.PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: pod})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	before := time.Now().UnixNano()
	if resp := ask(); resp.GetTimestamp() < before || resp.ContainersStatuses == nil || len(resp.ContainersStatuses) != 0 {
		t.Errorf("no container: timestamp %d (asked at %d), statuses %v; want both, empty", resp.GetTimestamp(), before, resp.ContainersStatuses)
	}
	ctr := eventContainer(t, s, pod, "web")
	if resp := ask(); resp.GetTimestamp() == 0 || len(resp.ContainersStatuses) != 1 || resp.ContainersStatuses[0].GetId() != ctr {
		t.Errorf("one container: timestamp %d, statuses %v; want both", resp.GetTimestamp(), resp.ContainersStatuses)
	}
	benchCreate(t, s, journal.KindContainer, "unreadable", pod, map[string]string{"config": "not protobuf"})
	if resp := ask(); resp.GetTimestamp() != 0 || resp.ContainersStatuses != nil {
		t.Errorf("an unreadable container: timestamp %d, statuses %v; want neither", resp.GetTimestamp(), resp.ContainersStatuses)
	}
}
