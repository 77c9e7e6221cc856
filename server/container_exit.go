package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/crijournal/crijournal/oci"
)

// reasonUnknown is the reason of an exit recorded without conmon's word: the runtime
// definitely lost the container (a reboot), or conmon died without writing the exit file.
const reasonUnknown = "ContainerStatusUnknown"

// runtimeQueryTimeout bounds the runtime queries of recordExit, which run detached from
// the request: a client that gives up must not cut a query short (DESIGN §6, "absence of
// an answer is not evidence").
const runtimeQueryTimeout = 30 * time.Second

// recordExit stores a container's exit in its record, once: from conmon's exit file, or
// as unknown when the runtime definitely does not know the container (oci.ErrNotFound: a
// reboot) or has it stopped while conmon never wrote an exit file. While the container
// runs it only records a start that the record lacks. Any other failure to learn the
// container's state (the runtime binary missing or failing, a timeout) is returned and
// changes nothing: it says nothing about the container.
//
// A started container whose conmon lives and has written no exit file is running
// (oci.Runtime.Running): that is answered from a pidfd, without asking the runtime, so
// that the kubelet's polling forks nothing. The runtime is asked only when that cannot
// tell: a container never marked started, or one whose conmon is gone without an exit
// file.
func (s *Server) recordExit(ctx context.Context, c container) error {
	if _, done := c.rec.Marker(markerFinishedAt); done {
		return nil
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return err
	}
	_, started := c.rec.Marker(markerStartedAt)
	if started && rt.Running(c.rec.ID) {
		return nil
	}
	code, at, ok, err := rt.ExitStatus(c.rec.ID)
	if err != nil {
		return err
	}
	reason := ""
	if !ok {
		qctx, cancel := detached(ctx, runtimeQueryTimeout)
		defer cancel()
		st, serr := rt.State(qctx, c.rec.ID)
		switch {
		case errors.Is(serr, oci.ErrNotFound):
			// The runtime lost it (a reboot): whatever it was, it no longer runs.
			code, at, reason = 255, time.Now(), reasonUnknown
		case serr != nil:
			return fmt.Errorf("container %s: state unknown, nothing recorded: %w", c.rec.ID, serr)
		case st.Status != oci.StatusStopped:
			if !started && (st.Status == oci.StatusRunning || st.Status == oci.StatusPaused) {
				// Started by a StartContainer that did not live to record it (the daemon
				// died between runc start and the marker): it runs, say so, or it would
				// stay CREATED and every StartContainer retry would fail.
				return s.journal.SetMarker(c.rec.ID, markerStartedAt, nowMarker())
			}
			return nil // still alive
		case !started:
			return nil // created, never started
		default:
			// Stopped: runc says so as soon as the init process is dead, a moment before
			// conmon has reaped it and written the exit file. Wait for conmon.
			if code, at, ok, err = rt.AwaitExit(qctx, c.rec.ID); err != nil {
				return err
			}
			if !ok {
				code, at, reason = 255, time.Now(), reasonUnknown
			}
		}
	}
	switch {
	case reason != "":
	case rt.OOMKilled(c.rec.ID):
		// conmon saw the cgroup run out of memory: the kubelet reports this reason.
		reason = "OOMKilled"
	case code != 0:
		reason = "Error"
	default:
		reason = "Completed"
	}
	return s.journal.SetMarkers(c.rec.ID, map[string]*string{
		markerExitCode:   stringPtr(strconv.Itoa(code)),
		markerReason:     stringPtr(reason),
		markerFinishedAt: stringPtr(at.UTC().Format(time.RFC3339Nano)),
	})
}

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
