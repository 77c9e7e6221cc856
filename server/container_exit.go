package server

import (
	"context"
	"strconv"
	"time"
)

// recordExit stores a container's exit in its record, once, as its runtime decides it
// (oci.Runtime.Exit: conmon's exit file, or unknown when the runtime definitely lost
// the container). While the container runs it only records a start that the record
// lacks: a container started by a StartContainer that did not live to record it (the
// daemon died between runc start and the marker) would otherwise stay CREATED, and
// every StartContainer retry would fail. A failure to learn the container's state is
// returned and changes nothing: it says nothing about the container.
func (s *Server) recordExit(ctx context.Context, c container) error {
	if _, done := c.rec.Marker(markerFinishedAt); done {
		return nil
	}
	if awaitsRestore(c.rec) {
		return nil // no runtime container until StartContainer restores it
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return err
	}
	_, started := c.rec.Marker(markerStartedAt)
	exit, err := rt.Exit(ctx, c.rec.ID, started)
	switch {
	case err != nil:
		return err
	case !exit.Exited && exit.Running && !started:
		return s.journal.SetMarker(c.rec.ID, markerStartedAt, nowMarker())
	case !exit.Exited:
		return nil
	}
	return s.exitMarkers(ctx, c, map[string]*string{
		markerExitCode:   stringPtr(strconv.Itoa(exit.Code)),
		markerReason:     stringPtr(exit.Reason),
		markerFinishedAt: stringPtr(exit.At.UTC().Format(time.RFC3339Nano)),
	})
}

// OnContainerExit records a container's exit as soon as conmon reports it (the runtimes'
// exit watchers call it), so the status survives a restart without polling, and queues
// the deletion of its runtime container (exitReaper).
func (s *Server) OnContainerExit(id string) {
	c, err := s.findContainer(id)
	if err != nil {
		return // not ours, or not yet created: ContainerStatus will record it
	}
	if err := s.recordExit(context.Background(), c); err != nil {
		s.log.Warn("container exit not recorded", "id", id, "name", c.rec.Name, "err", err)
		return
	}
	s.log.Info("container exited", "id", id, "name", c.rec.Name)
	s.reaper.add(id)
}
