package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crijournal/crijournal/journal"
)

// timelineWidth is the width of the bars of `crijournal inspect ID`, in columns.
const timelineWidth = 40

// Bar characters: a finished step, and one still open (its intent committed, no end yet).
const (
	barDone = '█'
	barOpen = '░'
)

// writeTimeline draws the creation r as a timeline, one bar per step on a common time axis
// from the record's creation: where the bar starts is when the step's intent was committed,
// its length how long the step took (a step without an end runs to now while the record is
// still being created, else to the record's last update). Each bar is followed by the
// step's duration and status; the step a creation is stuck at is marked with the stage it
// stalled at, so "where did these 4 minutes go" is answered at a glance.
func writeTimeline(w io.Writer, r journal.Record, now time.Time) error {
	if len(r.Steps) == 0 {
		_, err := fmt.Fprintf(w, "Timeline:  no step yet (%s, stage %q)\n", r.State, r.Stage)
		return err
	}
	origin := r.Created
	// end of each step, and of the whole axis.
	ends := make([]time.Time, len(r.Steps))
	axisEnd := origin
	for i, s := range r.Steps {
		switch {
		case !s.Finished.IsZero():
			ends[i] = s.Finished
		case r.State == journal.StateCreating:
			ends[i] = now
		default:
			ends[i] = r.Updated
		}
		if ends[i].Before(s.Started) {
			ends[i] = s.Started
		}
		if ends[i].After(axisEnd) {
			axisEnd = ends[i]
		}
	}
	span := axisEnd.Sub(origin)
	col := func(t time.Time) int {
		if span <= 0 {
			return 0
		}
		c := int(float64(t.Sub(origin)) / float64(span) * timelineWidth)
		return min(max(c, 0), timelineWidth)
	}

	fmt.Fprintf(w, "Timeline:  %s from creation to %s (%s)\n", roundDuration(span), axisEnd.Local().Format("15:04:05.000"), r.State)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, s := range r.Steps {
		from, to := col(s.Started), col(ends[i])
		if to == from && to < timelineWidth {
			to++ // every step gets at least one column
		} else if to == from {
			from--
		}
		fill := barDone
		if s.Finished.IsZero() {
			fill = barOpen
		}
		bar := strings.Repeat(" ", from) + strings.Repeat(string(fill), to-from) + strings.Repeat(" ", timelineWidth-to)
		note := ""
		if s.Status == journal.StepIntent && s.Finished.IsZero() {
			stage := s.Stage
			if stage == "" {
				stage = r.Stage
			}
			if r.State == journal.StateCreating {
				note = fmt.Sprintf("<- in progress: %s", stage)
			} else {
				note = fmt.Sprintf("<- stalled at: %s", stage)
			}
		}
		if s.LastError != "" {
			note = strings.TrimSpace(note + " error: " + s.LastError)
		}
		fmt.Fprintf(tw, "  %d\t%s\t|%s|\t%s\t%s\t%s\n", s.Seq, s.Kind, bar, roundDuration(ends[i].Sub(s.Started)), s.Status, note)
	}
	return tw.Flush()
}

// roundDuration keeps three significant figures or so: 4m2s, 1.53s, 12.3ms.
func roundDuration(d time.Duration) string {
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
