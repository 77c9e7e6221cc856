// Command crijournal is a Kubernetes CRI runtime whose pod sandbox and
// container creations are journaled in bbolt, step by step, before each step
// acts; see the README.
//
// With no subcommand it serves the CRI on its socket (serve). Every command
// reads the configuration the same way: defaults, the TOML file of --config,
// CRIJOURNAL_* environment variables, then flags.
package main

import (
	"fmt"
	"go.podman.io/storage/pkg/reexec"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/crijournal/crijournal/config"
)

// version is the version of the binary, set at build time with
// -ldflags "-X main.version=...".
var version = "dev"

// subcommands holds the constructors of crijournal's subcommands. Each file
// of this package that defines a subcommand appends its constructor in an
// init function, so that adding a command touches only its own file.
var subcommands []func() *cobra.Command

func main() {
	// containers/storage re-executes this binary for some of its work: serve that first.
	if reexec.Init() {
		return
	}
	if err := newRootCommand().Execute(); err != nil {
		// A configuration error may list several problems, one a line.
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(os.Stderr, "crijournal: %s\n", line)
		}
		os.Exit(1)
	}
}

// newRootCommand returns the crijournal command with its persistent flags
// and all subcommands.
func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "crijournal",
		Short: "A Kubernetes CRI runtime with a crash-safe creation journal",
		Long: `crijournal serves the Kubernetes Container Runtime Interface on a unix socket.
Every step of a pod sandbox or container creation is journaled in bbolt before it
acts, so a creation that outlives its request is kept for the retry, and one cut
short by a crash is rolled back at the next start.

Without a subcommand, crijournal serves (see "crijournal serve --help").`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          runServe,
		Version:       version,
	}
	// --version prints what `crijournal version` prints.
	root.SetVersionTemplate("{{printf \"%s\" .Annotations.versionText}}")
	root.Annotations = map[string]string{"versionText": versionText()}
	flags := root.PersistentFlags()
	flags.String("config", config.DefaultFile,
		"configuration file (TOML); a missing file is an error unless it is the default ["+configEnv+"]")
	config.BindFlags(flags)
	addServeFlags(root)
	for _, newCommand := range subcommands {
		root.AddCommand(newCommand())
	}
	return root
}

// configEnv names the environment variable that gives the configuration
// file when --config is not set.
const configEnv = config.EnvPrefix + "_CONFIG"

// loadConfig returns the configuration of cmd: the file named by --config
// (or $CRIJOURNAL_CONFIG, or config.DefaultFile, which may be missing), the
// environment and the flags of cmd that were set.
func loadConfig(cmd *cobra.Command) (config.Config, error) {
	path := "" // config.DefaultFile, may be missing
	if f := cmd.Flags().Lookup("config"); f != nil && f.Changed {
		path = f.Value.String()
	} else if p := os.Getenv(configEnv); p != "" {
		path = p
	}
	return config.Load(path, cmd.Flags())
}
