package server

import (
	"context"
	"fmt"

	"github.com/crijournal/crijournal/failpoint"
	"github.com/crijournal/crijournal/journal"
)

// step takes one journaled step of a creation: the intent is committed (durable) before act
// runs, and the step is marked done after it succeeds. Failure points are named
// "<flow>/<step kind>/{before-intent,after-intent,after-action}".
func (s *Server) step(ctx context.Context, flow string, rec journal.Record, stage string, kind journal.StepKind, args map[string]string, act func() error) error {
	point := flow + "/" + string(kind) + "/"
	s.log.Debug("stage", "kind", rec.Kind, "id", rec.ID, "name", rec.Name, "stage", stage)
	if err := failpoint.Inject(point + "before-intent"); err != nil {
		return err
	}
	seq, err := s.journal.Intent(ctx, rec.ID, stage, kind, args)
	if err != nil {
		return fmt.Errorf("journal intent: %w", err)
	}
	if err := failpoint.Inject(point + "after-intent"); err != nil {
		return err
	}
	if err := act(); err != nil {
		return err
	}
	if err := failpoint.Inject(point + "after-action"); err != nil {
		return err
	}
	return s.journal.Done(rec.ID, seq)
}
