// Package residency owns the memory the daemon keeps resident without needing it: the
// pages of its own executable that start-up and rare work (an image pull) map, and the
// heap such work leaves behind.
//
// Most of an idle daemon's RSS is its own executable: package initialisation touches code
// and read-only data all over the 50 MB binary, and each fault maps a whole window around
// the page touched (64 KiB of fault-around; on kernels from 6.18, the whole of a large
// page-cache folio, and a binary just written or read through read(2) sits in folios of up
// to 2 MiB). What serving then needs is a fraction of that. So:
//
//   - Every process started from the binary advises the kernel, before the Go runtime
//     starts, that its read-only data segment is read at random (MADV_RANDOM, in a C
//     constructor: constructor.go), so that a fault reads the one page it needs into the
//     page cache, as a small folio, instead of a read-ahead window of large ones. (The
//     kernel ignores the advice for executable mappings, whose read-ahead makes small
//     folios anyway.)
//   - The daemon (`crijournal serve`, or crijournal with no arguments) drops, in the same constructor, the page cache of its
//     executable that no process maps (POSIX_FADV_DONTNEED), so that the binary is read
//     back in small folios however it got into the cache (a build, an install, a backup);
//     it writes the executable's dirty pages back first (sync_file_range), since a
//     binary just built or copied may not be written back yet, and dirty pages are not
//     dropped.
//   - Release unmaps the executable's read-only segments, once serving and after each
//     image pull: pages come back, from the page cache, as they are used.
//   - Trim does that and returns the heap's free memory to the system
//     (runtime/debug.FreeOSMemory), after work that grows the heap for its own time, such
//     as an image pull's decompression buffers.
//
// Nothing here changes what the daemon does; a page released is read back by a minor
// fault on its next use. docs/BENCHMARKS.md ("The daemon's resident memory") has the
// figures.
package residency
