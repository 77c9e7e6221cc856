package storage

import (
	"context"
	"fmt"

	"github.com/crijournal/crijournal/journal"
)

// StepContainerStorage creates the storage container (the root filesystem) of a CRI
// container. Args: see ContainerArgs. The string is stored in the journal: never change it.
const StepContainerStorage journal.StepKind = "storage-container"

// ArgID is the key of StepContainerStorage's argument: the storage container's ID.
const ArgID = "id"

// ContainerArgs returns the journal arguments of a StepContainerStorage for storage
// container id.
func ContainerArgs(id string) map[string]string {
	return map[string]string{ArgID: id}
}

// RegisterUndos registers the undo of every step kind this package owns. stores hands out
// the open Store when an undo runs (at start-up recovery it may not be open yet: its error
// fails the undo, which is retried later).
func RegisterUndos(reg *journal.Registry, stores func() (*Store, error)) {
	reg.Register(StepContainerStorage, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		id := step.Args[ArgID]
		if id == "" {
			return fmt.Errorf("undo %s of %s: no %q argument", step.Kind, rec.ID, ArgID)
		}
		s, err := stores()
		if err != nil {
			return fmt.Errorf("undo %s of %s: %w", step.Kind, rec.ID, err)
		}
		return s.DeleteContainer(ctx, id)
	})
}
