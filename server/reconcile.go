package server

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/crijournal/crijournal/checkpoint"
	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
)

// Reconcile brings a created or cached record in line with the world at startup. A
// container's log is moved to the path its record names, if a claim's move was cut
// short; one that exited while the daemon was down gets its exit recorded (from conmon's
// exit file, or as unknown when the runtime lost it in a reboot). A sandbox whose
// namespace pins or files are gone (a reboot empties /run), or whose shared pid namespace lost its
// pause process (a service manager killing the whole control group), can never be ready
// again. A created one gets CNI DEL anyway, so host-local frees its addresses, and is
// marked stopped (also when the DEL fails: the removal runs it again); its record stays
// until the kubelet removes it. A cached one, which nobody holds yet, is rolled back, so
// that the retry builds a sound sandbox instead of claiming a broken one. A sound sandbox
// with a shared pid namespace gets its pause watcher. It reports whether anything changed.
func (s *Server) Reconcile(ctx context.Context, rec journal.Record) (bool, error) {
	if rec.Kind == journal.KindContainer {
		if rec.State != journal.StateCreated {
			return false, nil
		}
		if undone, err := s.reconcileRestore(ctx, rec); err != nil || undone {
			return undone, err
		}
		if pendingCheckpoint(rec) {
			// A checkpoint export a crash cut short: its work files and partial
			// archive go, and the container is thawed if CRIU left it frozen.
			uctx, cancel := detached(ctx, creation.UndoTimeout)
			err := s.journal.UndoSteps(uctx, rec.ID, nil, checkpoint.StepExport)
			cancel()
			if err != nil {
				return true, fmt.Errorf("container %s: undo of an interrupted checkpoint: %w", rec.ID, err)
			}
			if rec, err = s.journal.Get(rec.ID); err != nil {
				return true, err
			}
			_, err = s.reconcileContainer(ctx, rec)
			return true, err
		}
		return s.reconcileContainer(ctx, rec)
	}
	sb, err := decodeSandbox(rec)
	if err != nil {
		return false, err
	}
	if _, stopped := rec.Marker(markerStopped); stopped {
		return false, nil
	}
	lost := sb.lost()
	if lost == "" {
		if p := sb.obj.Namespaces[string(netns.PID)]; p != "" {
			s.watchPause(rec.ID, rec.Name, p)
		}
		return false, nil
	}
	if rec.State == journal.StateCached {
		s.log.Warn("cached sandbox can never be ready: rolling it back", "id", rec.ID, "name", rec.Name, "lost", lost)
		return true, s.creations.Rollback(ctx, rec)
	}
	nctx, cancel := detached(ctx, s.cfg.NetworkTimeout)
	defer cancel()
	at := nowMarker()
	if err := s.journal.UndoSteps(nctx, rec.ID, map[string]*string{markerNetworkStopped: at, markerStopped: at}, netns.StepAttach); err != nil {
		// Still not ready, whatever the DEL did: the kubelet will stop and remove the
		// pod, and the removal runs the DEL again (its failures retried by the journal).
		if merr := s.journal.SetMarker(rec.ID, markerStopped, at); merr != nil {
			err = fmt.Errorf("%w; and marking it stopped: %v", err, merr)
		}
		return true, fmt.Errorf("sandbox %s lost its namespaces: marked stopped, but its CNI DEL failed and is left to the removal: %w", rec.ID, err)
	}
	return true, nil
}

// lost says what a sandbox lost that it can never get back ("" when nothing): a
// namespace pin, or the pause process of its shared pid namespace.
func (sb sandbox) lost() string {
	for _, kind := range slices.Sorted(maps.Keys(sb.obj.Namespaces)) {
		path := sb.obj.Namespaces[kind]
		if !netns.IsPinned(path) {
			return kind + " namespace pin " + path
		}
		// A shared pid namespace whose pause process died takes no new process: the
		// pod's containers cannot run again.
		if kind == string(netns.PID) && !netns.PauseAlive(path) {
			return "pause process of " + path
		}
	}
	if _, gone := sb.rec.Marker(markerPauseExited); gone {
		return "pause process (marked exited)"
	}
	return sb.podFilesLost()
}

func (s *Server) reconcileContainer(ctx context.Context, rec journal.Record) (bool, error) {
	c, err := decodeContainer(rec)
	if err != nil || s.runtimes == nil {
		return false, err
	}
	// A claim that took another log path was committed before the log moved: finish
	// the move a crash cut short (a no-op when the log is where the record says).
	s.placeLog(c)
	if _, done := rec.Marker(markerFinishedAt); done {
		return false, nil
	}
	if err := s.recordExit(ctx, c); err != nil {
		return false, err
	}
	after, err := s.journal.Get(rec.ID)
	if err != nil {
		return false, err
	}
	_, done := after.Marker(markerFinishedAt)
	return done, nil
}
