package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// The look-ups of records that the calls share: a created sandbox or container by its
// ID or a unique prefix of it, in the state a call needs, and the helpers that read and
// write what a record holds (its object, its markers).

// findRecord returns the created record of kind whose ID is id or starts with it. An
// unknown ID gives an error of class errNotFound, a hidden one of class errNotYetCreated.
func (s *Server) findRecord(kind journal.Kind, id string) (journal.Record, error) {
	return s.lookupRecord(kind, id, false)
}

// lookupRecord is findRecord; with shared, the record is the journal's published one, not
// a copy (journal.Peek, journal.Snapshot): read it, never change it.
func (s *Server) lookupRecord(kind journal.Kind, id string, shared bool) (journal.Record, error) {
	if id == "" {
		return journal.Record{}, invalidf("%s ID is required", kind)
	}
	var matches []journal.Record
	if journal.ValidID(id) {
		// A whole ID: one look-up, not a scan of every record.
		get := s.journal.Get
		if shared {
			get = s.journal.Peek
		}
		if r, err := get(id); err == nil && r.Kind == kind && r.HoldsName {
			matches = []journal.Record{r}
		}
	} else {
		list := s.journal.List
		if shared {
			list = s.journal.Snapshot
		}
		matches = list(func(r *journal.Record) bool {
			return r.Kind == kind && r.HoldsName && strings.HasPrefix(r.ID, id)
		})
	}
	for _, m := range matches {
		if m.ID == id {
			matches = []journal.Record{m}
			break
		}
	}
	switch {
	case len(matches) == 0:
		return journal.Record{}, newError(errNotFound, "%s %s not found", kind, id)
	case len(matches) > 1:
		return journal.Record{}, invalidf("%s ID prefix %q is ambiguous (%d matches)", kind, id, len(matches))
	}
	rec := matches[0]
	if rec.State != journal.StateCreated {
		return journal.Record{}, newError(errNotYetCreated, "%s %s is not yet created", kind, rec.ID)
	}
	return rec, nil
}

func (s *Server) findSandbox(id string) (sandbox, error) {
	rec, err := s.findRecord(journal.KindSandbox, id)
	if err != nil {
		return sandbox{}, err
	}
	return decodeSandbox(rec)
}

func (s *Server) findContainer(id string) (container, error) {
	rec, err := s.findRecord(journal.KindContainer, id)
	if err != nil {
		return container{}, err
	}
	return decodeContainer(rec)
}

// viewSandbox is findSandbox for a call that only reads the sandbox (PodSandboxStatus):
// its record is the journal's published one and its object the decode cache's when the
// cache holds this very object (see decodeCache.view), so that the kubelet's status of
// every pod every ~10 s neither copies nor decodes. Read it; never change it.
func (s *Server) viewSandbox(id string) (sandbox, error) {
	rec, err := s.lookupRecord(journal.KindSandbox, id, true)
	if err != nil {
		return sandbox{}, err
	}
	sb, err := s.sandboxCache.view(rec, decodeSandbox)
	sb.rec = rec
	return sb, err
}

// viewContainer is findContainer for a call that only reads the container
// (ContainerStatus), as viewSandbox is findSandbox's. Read it; never change it.
func (s *Server) viewContainer(id string) (container, error) {
	rec, err := s.lookupRecord(journal.KindContainer, id, true)
	if err != nil {
		return container{}, err
	}
	c, err := s.containerCache.view(rec, decodeContainer)
	c.rec = rec
	return c, err
}

// readySandbox returns a sandbox that exists and is ready.
func (s *Server) readySandbox(id string) (sandbox, error) {
	sb, err := s.findSandbox(id)
	if err != nil {
		return sandbox{}, err
	}
	if sb.state() != runtimeapi.PodSandboxState_SANDBOX_READY {
		return sandbox{}, newError(errWrongState, "pod sandbox %s is not ready", sb.rec.ID)
	}
	return sb, nil
}

// runningContainer returns a container that exists and is running.
func (s *Server) runningContainer(id string) (container, error) {
	c, err := s.findContainer(id)
	if err != nil {
		return container{}, err
	}
	if st := c.state(); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return container{}, errContainerState(c.rec.ID, st, "RUNNING")
	}
	return c, nil
}

// containersOf returns the records of a sandbox's containers that hold their names: created
// ones, and those in progress or cached.
func (s *Server) containersOf(sandboxID string) []journal.Record {
	return s.journal.List(func(r *journal.Record) bool {
		return r.Kind == journal.KindContainer && r.Parent == sandboxID && r.HoldsName
	})
}

// createdContainersOf returns the records of a sandbox's created containers, oldest
// first, as published. They are shared with the journal (see journal.Snapshot): read them.
// It looks at the sandbox's records alone (journal.SnapshotChildren): every
// PodSandboxStatus asks, and a look at every record made the kubelet's status poll grow
// with the square of the pods.
func (s *Server) createdContainersOf(sandboxID string) []journal.Record {
	return s.journal.SnapshotChildren(sandboxID, func(r *journal.Record) bool {
		return r.Kind == journal.KindContainer && r.State == journal.StateCreated
	})
}

// decodeObject reads a record's object (JSON) into obj, then the CRI config that obj
// carries as protobuf (*configBytes, filled by the first step) into config.
func decodeObject(rec journal.Record, obj any, configBytes *[]byte, config proto.Message) error {
	if err := json.Unmarshal(rec.Object, obj); err != nil {
		return fmt.Errorf("%s %s: decode journal object: %w", rec.Kind, rec.ID, err)
	}
	if err := proto.Unmarshal(*configBytes, config); err != nil {
		return fmt.Errorf("%s %s: decode config: %w", rec.Kind, rec.ID, err)
	}
	return nil
}

func mustMarshal(m proto.Message) []byte {
	b, err := proto.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("marshal %T: %v", m, err))
	}
	return b
}

// nowMarker returns the time now as a marker's value (UTC, RFC 3339 with nanoseconds).
func nowMarker() *string {
	t := time.Now().UTC().Format(time.RFC3339Nano)
	return &t
}

func markerTime(rec journal.Record, key string) int64 {
	v, ok := rec.Marker(key)
	if !ok {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return 0
	}
	return t.UnixNano()
}

func stringPtr(s string) *string { return &s }

func labelsMatch(labels, selector map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
