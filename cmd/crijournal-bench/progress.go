package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progressLines is how many whole lines a run reports at most when the output is not a
// terminal (a log file, CI): one at each 5%, and the last.
const progressLines = 20

// newProgress returns a bench progress callback (bench.Options.Progress) that writes to w:
// a progress bar redrawn in place when w is a terminal, else whole lines ("pods up: 10/50
// (20%) after 3.1s"), so that a log of a long run shows how it went and is not a single line
// of carriage returns. A run calls it with done 0 when it starts, then once per pod up to
// total; each run (a round of a comparison) gets a bar of its own.
func newProgress(w io.Writer) func(done, total int) {
	f, isFile := w.(*os.File)
	if isFile && term.IsTerminal(int(f.Fd())) {
		var bar *progressbar.ProgressBar
		return func(done, total int) {
			if bar == nil || done == 0 {
				bar = progressbar.NewOptions(total,
					progressbar.OptionSetWriter(w),
					progressbar.OptionSetDescription("pods up"),
					progressbar.OptionShowCount(),
					progressbar.OptionSetElapsedTime(true),
					progressbar.OptionSetPredictTime(true),
					progressbar.OptionThrottle(100*time.Millisecond),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(w) }),
				)
			}
			_ = bar.Set(done)
			if done >= total {
				_ = bar.Finish()
				bar = nil
			}
		}
	}
	start := time.Now()
	last := 0
	return func(done, total int) {
		if done == 0 || done < last {
			start, last = time.Now(), 0
			return
		}
		step := max(1, total/progressLines)
		if done/step == last/step && done < total {
			return
		}
		fmt.Fprintf(w, "pods up: %d/%d (%d%%) after %s\n", done, total, done*100/max(total, 1), time.Since(start).Round(100*time.Millisecond))
		last = done
	}
}
