package main

import (
	"github.com/spf13/cobra"
)

func init() { subcommands = append(subcommands, newConfigCommand) }

func newConfigCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration as TOML",
		Long: `Print the effective configuration (defaults, file, environment and flags) as a
complete TOML file, which can be used as the configuration file:

  crijournal config > /etc/crijournal/crijournal.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadConfig(cmd)
			if err != nil {
				return err
			}
			data, err := cfg.TOML()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
}
