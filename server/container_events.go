package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// eventBuffer is how many container events wait for one subscriber. It is the kubelet's
// own (its Evented PLEG reads the stream into a channel of 1,000) and CRI-O's (one
// channel of 1,000 for all). A subscriber whose buffer is full loses the events that do
// not fit, with a warning in the log when it starts losing them and a count when it has
// caught up; the others and the journal never wait for it. containerd's queue (100 a
// subscriber) waits instead, so that one stuck client holds up every event and the
// calls that send them; ending the stream would cost the kubelet one of its few retries
// (it gives up the Evented PLEG after eventedPlegMaxStreamRetries) for a loss its
// periodic relist repairs anyway.
const eventBuffer = 1000

// GetContainerEvents streams the container events (see container_events_source.go for
// what they are and when they are sent) from the moment it is called until the client
// goes or the server stops (Close, StopEvents). Nothing is replayed: a client that
// (re)connects lists what exists. The response headers are sent once the client is
// subscribed.
func (s *Server) GetContainerEvents(_ *runtimeapi.GetEventsRequest, stream runtimeapi.RuntimeService_GetContainerEventsServer) error {
	if err := s.journal.Err(); err != nil {
		return toStatus(newError(errUnavailable, "%v; the runtime is stopping and takes no more work", err))
	}
	sub, err := s.events.subscribe(s)
	if err != nil {
		return toStatus(err)
	}
	defer s.events.unsubscribe(sub)
	// The headers say the client is subscribed: one that waits for them (Header)
	// misses no event of a change published after.
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil // the client went
		case ev, ok := <-sub.c:
			if !ok {
				return toStatus(newError(errUnavailable, "the runtime is stopping: no more container events"))
			}
			if err := stream.Send(ev); err != nil {
				return err
			}
		}
	}
}

// StopEvents ends the container event streams and the goroutine that feeds them, and
// waits for it. Call it before the gRPC server's graceful stop, which waits for the
// streams; Close calls it too. Later subscriptions fail with Unavailable.
func (s *Server) StopEvents() {
	s.events.stopAndWait()
}

// eventFeed hands the container events to the streams. Its goroutine (publishEvents) is
// started by the first subscription and belongs to the server: it runs until
// StopEvents or Close, whether or not anyone subscribes, keeping its view current.
// The zero value is ready to use.
type eventFeed struct {
	mu      sync.Mutex
	subs    map[*eventSub]struct{}
	running bool               // publishEvents was started
	closed  bool               // no more subscriptions
	stop    context.CancelFunc // ends publishEvents
	done    chan struct{}      // closed when publishEvents has ended
}

// eventSub is one stream's subscription: a bounded buffer, closed by the feed when it
// ends.
type eventSub struct {
	c       chan *runtimeapi.ContainerEventResponse
	dropped int // events lost since the last one delivered; under the feed's lock
}

// subscribe adds a subscriber, starting the feed's goroutine at the first one. The
// view it starts from is taken here, after the channel of the next change: the first
// subscriber misses no change published after it subscribed.
func (f *eventFeed) subscribe(s *Server) (*eventSub, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, newError(errUnavailable, "the runtime is stopping: no more container events")
	}
	if !f.running {
		ctx, cancel := context.WithCancel(s.lifetime)
		changed := s.journal.Changed()
		seen := viewOf(s.journal.Snapshot(eventRecord))
		f.running, f.stop, f.done = true, cancel, make(chan struct{})
		go s.publishEvents(ctx, changed, seen)
	}
	sub := &eventSub{c: make(chan *runtimeapi.ContainerEventResponse, eventBuffer)}
	if f.subs == nil {
		f.subs = map[*eventSub]struct{}{}
	}
	f.subs[sub] = struct{}{}
	return sub, nil
}

func (f *eventFeed) unsubscribe(sub *eventSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.subs, sub)
}

// subscribed reports whether anyone listens.
func (f *eventFeed) subscribed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.subs) > 0
}

// send gives events to every subscriber, in order, without waiting: what does not fit
// in a subscriber's buffer is lost to it (see eventBuffer).
func (f *eventFeed) send(log *slog.Logger, events []*runtimeapi.ContainerEventResponse) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for sub := range f.subs {
		for _, ev := range events {
			select {
			case sub.c <- ev:
				if sub.dropped > 0 {
					log.Info("container event subscriber caught up", "lost", sub.dropped)
					sub.dropped = 0
				}
			default:
				if sub.dropped == 0 {
					log.Warn("container event subscriber too slow: its buffer is full, its events are dropped until it catches up",
						"buffer", eventBuffer, "container", ev.ContainerId, "type", ev.ContainerEventType)
				}
				sub.dropped++
			}
		}
	}
}

// end is publishEvents's last act: every stream ends, and no one subscribes any more.
func (f *eventFeed) end() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for sub := range f.subs {
		close(sub.c)
	}
	f.subs = nil
	close(f.done)
}

func (f *eventFeed) stopAndWait() {
	f.mu.Lock()
	f.closed = true
	stop, done := f.stop, f.done
	f.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}

// publishEvents turns each published change of the journal into container events
// (see container_events_source.go), from the view seen, until ctx ends. changed was
// taken before seen was looked at.
func (s *Server) publishEvents(ctx context.Context, changed <-chan struct{}, seen view) {
	defer s.events.end()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		changed = s.journal.Changed()
		at := time.Now()
		now := viewOf(s.journal.Snapshot(eventRecord))
		if ts := transitions(seen, now); len(ts) > 0 && s.events.subscribed() {
			s.events.send(s.log, s.eventResponses(ts, seen, now, at))
		}
		seen = now
	}
}
