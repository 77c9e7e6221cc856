package server

import (
	"slices"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// What the container events say, and where it comes from: the journal as published,
// never the calls that change it.
//
// The published journal holds only what is committed (a durable change is published
// once its commit has succeeded), so an event read from it can never be taken back:
// a creation that is rolled back never was created there, and one cached for the
// retry is hidden until it is claimed. Reading it, rather than hearing from each call
// that commits, also catches every committer: the exit watch, ContainerStatus,
// StopContainer, the pause watch, a sandbox's teardown, recovery. The events of one
// record come in its lifecycle's order whatever order the committing goroutines ran in.
//
// A container's events are:
//
//   - CREATED when its record is created: settled for a live request, or claimed by the
//     retry. A container cached because its request timed out was never answered, and
//     gets none; its claim is its creation as far as the kubelet knows, and sends it.
//   - STARTED when its started_at marker is committed (StartContainer, or an exit or
//     status call finding it running without one), unless it was announced STOPPED
//     already: a container that exits at once may have its exit recorded (by the exit
//     watch) before StartContainer records its start.
//   - STOPPED when its finished_at marker is committed: StopContainer, or its exit by
//     itself (conmon's exit file, recorded by the exit watch or a status call).
//   - DELETED when its record stops being created: Remove marks it removing, durably,
//     before undoing anything, and a removal is never taken back (a crash finishes it).
//     A started container that goes without a STOPPED (removed while running) gets one
//     first: it no longer runs.
//
// A sandbox has the same events, as containerd's and CRI-O's send them (its own ID as
// container_id): CREATED and STARTED when it is created (it runs when it is created),
// STOPPED when it is not ready any more (StopPodSandbox, or its pause process exited),
// DELETED when it is removed. The kubelet asks for a relist of the pod on STOPPED.
//
// One goroutine (publishEvents) compares each published view with the one before.
// Changes published between two looks come in one: a record seen first started gets
// CREATED then STARTED; a record created and removed between two looks is never seen
// and gets nothing (the kubelet's relist still sees what is left).

// lifecycle is where a sandbox or container stands, as its published record says.
type lifecycle struct {
	rec     journal.Record // as published; shared with the journal, read only
	pos     int            // its place in the view, oldest first
	started bool
	stopped bool
}

// view is the events' view of the journal: the created sandboxes and containers by ID.
type view map[string]lifecycle

// eventRecord keeps the records the events are about: created sandboxes and containers.
func eventRecord(r *journal.Record) bool {
	return (r.Kind == journal.KindSandbox || r.Kind == journal.KindContainer) && r.State == journal.StateCreated
}

// viewOf makes the view of the records that eventRecord kept, oldest first.
func viewOf(recs []journal.Record) view {
	v := make(view, len(recs))
	for i, r := range recs {
		l := lifecycle{rec: r, pos: i}
		if r.Kind == journal.KindSandbox {
			l.started = true
			l.stopped = sandbox{rec: r}.state() == runtimeapi.PodSandboxState_SANDBOX_NOTREADY
		} else {
			_, l.started = r.Marker(markerStartedAt)
			_, l.stopped = r.Marker(markerFinishedAt)
		}
		v[r.ID] = l
	}
	return v
}

// podOf is the ID of the sandbox a record belongs to: its parent, or its own.
func (l lifecycle) podOf() string {
	if l.rec.Kind == journal.KindSandbox {
		return l.rec.ID
	}
	return l.rec.Parent
}

// transition is one event: what happened to which record.
type transition struct {
	l    lifecycle // the record after it (before, for a deletion)
	kind runtimeapi.ContainerEventType
}

// transitions returns the events that take the view before to the view after: first
// those of the records in after, oldest record first (a sandbox before its containers),
// each record's in its lifecycle's order; then the deletions, newest record first (the
// containers before their sandbox).
func transitions(before, after view) []transition {
	var out []transition
	for _, l := range sortedByPos(after) {
		was, seen := before[l.rec.ID]
		if !seen {
			out = append(out, transition{l, runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT})
		}
		if l.started && !was.started && !was.stopped {
			out = append(out, transition{l, runtimeapi.ContainerEventType_CONTAINER_STARTED_EVENT})
		}
		if l.stopped && !was.stopped {
			out = append(out, transition{l, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT})
		}
	}
	gone := sortedByPos(before)
	slices.Reverse(gone)
	for _, l := range gone {
		if _, kept := after[l.rec.ID]; kept {
			continue
		}
		if l.started && !l.stopped {
			out = append(out, transition{l, runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT})
		}
		out = append(out, transition{l, runtimeapi.ContainerEventType_CONTAINER_DELETED_EVENT})
	}
	return out
}

func sortedByPos(v view) []lifecycle {
	out := make([]lifecycle, 0, len(v))
	for _, l := range v {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b lifecycle) int { return a.pos - b.pos })
	return out
}

// eventResponses makes the events of transitions seen at a look taken at at. Each
// carries its pod's sandbox status and the statuses of the pod's created containers,
// as the view after has them (a deleted sandbox's status is its last one); an event
// whose sandbox cannot be decoded has no sandbox status, which the CRI allows and
// the kubelet ignores.
func (s *Server) eventResponses(ts []transition, before, after view, at time.Time) []*runtimeapi.ContainerEventResponse {
	type pod struct {
		sandbox    *runtimeapi.PodSandboxStatus
		containers []*runtimeapi.ContainerStatus
	}
	pods := map[string]*pod{}
	for _, t := range ts {
		pods[t.l.podOf()] = nil
	}
	members := map[string][]lifecycle{} // a pod's created containers, in view order
	for _, l := range sortedByPos(after) {
		if _, ok := pods[l.rec.Parent]; ok && l.rec.Kind == journal.KindContainer {
			members[l.rec.Parent] = append(members[l.rec.Parent], l)
		}
	}
	for id := range pods {
		p := &pod{containers: []*runtimeapi.ContainerStatus{}}
		last, ok := after[id]
		if !ok {
			last, ok = before[id]
		}
		if ok {
			if sb, err := s.listedSandbox(last.rec); err == nil {
				p.sandbox = sb.status()
			} else {
				s.log.Warn("sandbox not decodable: its container events go without its status", "id", id, "err", err)
			}
		}
		for _, l := range members[id] {
			c, err := s.listedContainer(l.rec)
			if err != nil {
				s.log.Warn("container not decodable: left out of its pod's container events", "id", l.rec.ID, "name", l.rec.Name, "err", err)
				continue
			}
			p.containers = append(p.containers, c.status())
		}
		pods[id] = p
	}
	out := make([]*runtimeapi.ContainerEventResponse, 0, len(ts))
	for _, t := range ts {
		p := pods[t.l.podOf()]
		out = append(out, &runtimeapi.ContainerEventResponse{
			ContainerId: t.l.rec.ID, ContainerEventType: t.kind, CreatedAt: at.UnixNano(),
			PodSandboxStatus: p.sandbox, ContainersStatuses: p.containers,
		})
	}
	return out
}
