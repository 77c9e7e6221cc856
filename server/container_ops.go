package server

import (
	"context"
)

// OnContainerExit records a container's exit as soon as conmon reports it (the runtimes'
// exit watchers call it), so the status survives a restart without polling.
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
}
