package oci

import (
	"os"
	"sync"
)

// Answering "is it still running?" without running the runtime. conmon waits for the
// container's process and writes the exit file before it exits itself, so while a
// container's conmon lives and no exit file is there, the container has not ended (or is
// ending this very moment, and its exit file follows). A pidfd of that conmon, taken once
// (at Create, or at the first question after a daemon restart, when the process is
// checked to be that container's conmon), answers it with one poll: no process is forked
// and a recycled PID cannot fool it.

// conmonWatch holds a pidfd of each container's conmon, by container ID.
type conmonWatch struct {
	mu  sync.Mutex
	fds map[string]*os.File
}

// keep stores f as the pidfd of id's conmon, replacing (and closing) any other.
func (w *conmonWatch) keep(id string, f *os.File) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fds == nil {
		w.fds = map[string]*os.File{}
	}
	if old := w.fds[id]; old != nil && old != f {
		old.Close()
	}
	w.fds[id] = f
}

// take returns the pidfd kept for id, or nil.
func (w *conmonWatch) take(id string) *os.File {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fds[id]
}

// forget closes and drops the pidfd kept for id, if it is f (any, when f is nil).
func (w *conmonWatch) forget(id string, f *os.File) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old := w.fds[id]; old != nil && (f == nil || old == f) {
		old.Close()
		delete(w.fds, id)
	}
}

// Running reports whether the container is definitely not over: its conmon is alive and
// has written no exit file. It runs no process (see conmonWatch): one poll of a pidfd
// kept from Create, or, for a container made before a restart, opened once and checked
// to be this container's conmon. false says only that this cannot be told so cheaply
// (conmon is gone, an exit file is there, or the ID is invalid): ask ExitStatus and
// State.
func (r *Runtime) Running(id string) bool {
	if validID(id) != nil {
		return false
	}
	f := r.conmons.take(id)
	if f == nil {
		var err error
		if f, _, err = r.openConmon(id); err != nil || f == nil {
			return false
		}
		r.conmons.keep(id, f)
	}
	if exited(f) {
		r.conmons.forget(id, f)
		return false
	}
	// conmon writes the exit file before it exits, and the file stays: none after the
	// poll means none before it either (one look, after the poll, not one on each side).
	return !exists(r.exitFile(id))
}
