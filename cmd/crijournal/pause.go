package main

import (
	"github.com/spf13/cobra"

	"github.com/crijournal/crijournal/netns"
)

func init() {
	subcommands = append(subcommands, func() *cobra.Command {
		return &cobra.Command{
			Use:   "pause [sandbox-id]",
			Short: "Hold a pod's shared pid namespace as its PID 1 (started by the daemon)",
			Long: `pause is the init of a pod's shared pid namespace. The daemon starts it for pods
that ask for one (namespace_options.pid = POD); it reaps the processes it is handed
and exits with status 0 on SIGTERM or SIGINT. The sandbox ID argument is only a
label, so that ps shows which pod the process belongs to. It reads no
configuration and logs nothing.`,
			Hidden: true,
			Args:   cobra.MaximumNArgs(1),
			Run: func(cmd *cobra.Command, args []string) {
				netns.RunPause()
			},
		}
	})
}
