package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"text/tabwriter"

	"github.com/crijournal/crijournal/config"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/layout"
	"github.com/crijournal/crijournal/leaks"
)

// runLeaks prints what the node holds that the journal does not account for (package
// leaks), and fails when there is any.
func runLeaks(ctx context.Context, cfg config.Config, src *recordSource, out io.Writer, o inspectOptions) error {
	n := leaks.Node{Layout: cfg.Layout(), CgroupParents: o.cgroupParents}
	var err error
	if n.Records, err = leakRecords(ctx, cfg, src); err != nil {
		return err
	}
	n.DaemonDown = src.from != fromDaemon
	rep, err := leaks.Find(ctx, n)
	if err != nil {
		return fmt.Errorf("look for leaks: %w", err)
	}
	if o.asJSON {
		if err := writeJSON(out, rep); err != nil {
			return err
		}
	} else if err := printLeaks(out, rep, src.from); err != nil {
		return err
	}
	if len(rep.Leaks) > 0 {
		return fmt.Errorf("%d leak(s) on the node", len(rep.Leaks))
	}
	return nil
}

// leakRecords reads the journal's records: from the daemon, or from the file while it is
// down; a node without a journal file has none.
func leakRecords(ctx context.Context, cfg config.Config, src *recordSource) ([]journal.Record, error) {
	records, err := src.records(ctx)
	if err == nil {
		return records, nil
	}
	if _, serr := os.Stat(cfg.Layout().JournalFile()); errors.Is(serr, fs.ErrNotExist) {
		src.from = "no journal file " + cfg.Layout().JournalFile() + ", daemon down"
		return nil, nil
	}
	return nil, err
}

func printLeaks(w io.Writer, rep leaks.Report, from string) error {
	if len(rep.Leaks) == 0 {
		fmt.Fprintf(w, "no leaks: every one of the %d things of the daemon's on the node is held by a journal record (records %s)\n", len(rep.Held), from)
		return nil
	}
	fmt.Fprintf(w, "%d leak(s) (records %s; %d things held by records):\n", len(rep.Leaks), from, len(rep.Held))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tWHAT\tOWNER\tWHY")
	for _, l := range rep.Leaks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", l.Kind, l.What, l.Owner, l.Reason)
	}
	return tw.Flush()
}

// nodePaths is what inspect --paths prints: the node's paths (package layout).
func nodePaths(l layout.Node) map[string]any {
	handlers := map[string]any{}
	for _, h := range l.Handlers() {
		handlers[h] = map[string]string{"runtime_root": l.RuntimeRoot(h), "conmon_state": l.ConmonState(h).Dir()}
	}
	return map[string]any{
		"journal": l.JournalFile(), "storage_root": l.StorageRootDir(), "storage_run_root": l.StorageRunRootDir(),
		"userns_rootfs": l.UsernsRootfsDir(), "image_cache": l.ImageCacheDir(), "inspect_socket": l.InspectSocket(),
		"namespace_dir": l.NamespaceDir, "pod_files": l.PodFilesDir(), "cni_cache": l.CNICache(), "handlers": handlers,
	}
}
