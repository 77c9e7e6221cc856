// Package config holds crijournal's configuration: one Config struct, its
// defaults, loading and validation.
//
// A Config is built in layers, each overriding the one before it:
//
//  1. the defaults (Default);
//  2. a TOML file, DefaultFile unless another path is given. A missing file
//     at the default path means "defaults only"; a missing file at a path
//     that was given explicitly is an error;
//  3. environment variables CRIJOURNAL_<KEY>: the TOML key in upper case,
//     with nested keys joined by "_" (cache_ttl is CRIJOURNAL_CACHE_TTL,
//     runtimes.runc.path is CRIJOURNAL_RUNTIMES_RUNC_PATH). List values are
//     comma-separated. Environment variables can only set runtime handlers
//     that already exist in the defaults or the file. Other CRIJOURNAL_*
//     variables are ignored;
//  4. command-line flags registered by BindFlags, one per scalar key, named
//     after the key with "-" for "_" (cache_ttl is --cache-ttl). Only flags
//     that were set on the command line count.
//
// Pull mirrors (Registries, [[registries]] tables with prefix,
// location and insecure) come from the file only.
//
// Load does all of that and then Validate. Every error about a value is a
// *KeyError that names the key and, from Load, where the value came from
// (the file, the environment variable or the flag). Keys in the file that
// crijournal does not know are errors (ErrUnknownKey), so a typo is never
// silently ignored.
//
// Config.TOML renders a Config as a complete, commented TOML file that Load
// reads back to an equal Config; `crijournal config` prints it.
//
// Empty values of a few path keys stand for a path derived from another key;
// use the methods (JournalFile, StorageRootDir, StorageRunRootDir,
// RuntimeRoot, RuntimePath) instead of reading those fields directly. ImageCacheDir is
// derived from root alone.
package config
