package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, newVersionCommand) }

// revision is the git commit the binary was built from, set at build time with
// -ldflags "-X main.revision=..."; when it is empty the Go toolchain's build
// information (vcs.revision) is used, if any.
var revision = ""

// versionText is what `crijournal version` and `crijournal --version` print: the version,
// the git revision (with "-dirty" when built from a modified tree), Go and the platform.
func versionText() string {
	rev, dirty := revision, false
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch {
			case s.Key == "vcs.revision" && rev == "":
				rev = s.Value
			case s.Key == "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	} else if dirty && revision == "" {
		rev += "-dirty"
	}
	return fmt.Sprintf("crijournal %s\ngit revision %s\ngo version %s %s/%s\n",
		version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of crijournal, its git revision and the Go it was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), versionText())
			return err
		},
	}
}
