package server

import (
	"context"

	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
)

// watchPause watches the pause process holding a sandbox's shared pid namespace, without
// polling, from creation (or, for one made before a restart, from recovery; or at the
// latest from its claim) until it exits. If it exits while the sandbox lives, a created
// sandbox is marked not ready at once, and a cached one, which nobody holds yet, is rolled
// back so that the retry builds a sound one instead of claiming a broken one. The removal
// of the sandbox kills the pause itself: that exit is ignored. A sandbox is watched once.
// The watch belongs to the server: it ends with that exit, or when Close is called.
func (s *Server) watchPause(id, name, path string) {
	if _, watched := s.pauseWatches.LoadOrStore(id, struct{}{}); watched {
		return
	}
	err := netns.WatchPause(s.lifetime, path, func() {
		defer s.pauseWatches.Delete(id)
		rec, err := s.journal.Get(id)
		if err != nil {
			return
		}
		if _, done := rec.Marker(markerPauseExited); done {
			return
		}
		switch rec.State {
		case journal.StateCached:
			s.log.Warn("the pause process of the cached sandbox exited: rolling it back", "id", id, "name", rec.Name)
			uctx, cancel := context.WithTimeout(s.lifetime, creation.UndoTimeout)
			err := s.creations.Undo(uctx, rec)
			cancel()
			if err != nil {
				s.log.Warn("cannot roll back the cached sandbox whose pause process exited; its expiry will", "id", id, "name", rec.Name, "err", err)
			}
		case journal.StateCreated:
			s.log.Warn("the pause process of the sandbox exited: the sandbox is not ready", "id", id, "name", rec.Name)
			if err := s.journal.SetMarker(id, markerPauseExited, nowMarker()); err != nil {
				s.log.Warn("cannot mark the sandbox not ready", "id", id, "name", rec.Name, "err", err)
			}
		}
	})
	if err != nil {
		s.pauseWatches.Delete(id)
		s.log.Warn("cannot watch the pause process; its exit will be noticed at the next start", "id", id, "name", name, "err", err)
	}
}
