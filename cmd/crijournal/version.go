package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, newVersionCommand) }

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of crijournal and of Go it was built with",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "crijournal %s\ngo version %s %s/%s\n",
				version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
