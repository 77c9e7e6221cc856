package residency

/*
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// SPLIT_RUN is the size of the mappings a serving daemon cuts its read-only segments into
// (split_runs): at most this much of the executable is made resident by one page fault.
#define SPLIT_RUN (8 * 1024)

// segments are the program's loadable segments that are not writable (its code, its
// read-only data and function tables), page-aligned, and the end of the loaded part of
// the file.
struct segments {
	off_t loaded;
	int n;
	unsigned long start[8], end[8];
};

// find_segments fills a struct segments, and advises MADV_RANDOM on the read-only, not
// executable, segments (the kernel ignores it for executable ones).
static int find_segments(struct dl_phdr_info *info, size_t size, void *data) {
	unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE);
	struct segments *segs = data;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (off_t)(ph->p_offset + ph->p_filesz) > segs->loaded)
			segs->loaded = ph->p_offset + ph->p_filesz;
		if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W) != 0)
			continue;
		unsigned long start = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
		unsigned long end = (info->dlpi_addr + ph->p_vaddr + ph->p_memsz + page - 1) & ~(page - 1);
		if ((ph->p_flags & PF_X) == 0)
			madvise((void *)start, end - start, MADV_RANDOM);
		if (segs->n < 8) {
			segs->start[segs->n] = start;
			segs->end[segs->n] = end;
			segs->n++;
		}
	}
	return 1; // the first object is the program; the libraries are not ours
}

// split_runs cuts the mapping of [start, end) into mappings of SPLIT_RUN bytes, by setting
// VM_NOHUGEPAGE on every other one: the kernel merges neighbouring mappings only when
// their flags agree. (The flag only keeps huge pages away, which the executable's read-only
// mappings do not get unless asked for.) A page fault maps nothing outside the mapping it
// hit, so the kernel's fault-around, which maps the cached pages of the 64 KiB around the
// page touched, then maps at most SPLIT_RUN bytes.
static void split_runs(unsigned long start, unsigned long end) {
	for (unsigned long a = start + SPLIT_RUN; a < end; a += 2 * SPLIT_RUN)
		madvise((void *)a, end - a < SPLIT_RUN ? end - a : SPLIT_RUN, MADV_NOHUGEPAGE);
}

// crijournal_residency runs before the Go runtime starts (glibc passes init_array
// functions argc and argv). Failures change nothing but the memory figures: ignored.
__attribute__((constructor)) static void crijournal_residency(int argc, char **argv) {
	struct segments segs = {0};
	dl_iterate_phdr(find_segments, &segs);
	if (argc == 1 || strcmp(argv[1], "serve") == 0) { // crijournal serves without a subcommand
		for (int i = 0; i < segs.n; i++)
			split_runs(segs.start[i], segs.end[i]);
		int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			// Dirty pages are not dropped: a binary just built or installed may not be
			// written back yet. Write them back first (nothing to do for a clean file).
			sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			// Read the loaded part back at once, in small folios (read-ahead asked for
			// does not make large ones), rather than a page a fault.
			posix_fadvise(fd, 0, segs.loaded, POSIX_FADV_WILLNEED);
			close(fd);
		}
	}
}
*/
import "C"

// splitRun is the size of the mappings a serving daemon's read-only segments are cut into
// (SPLIT_RUN in the constructor).
const splitRun = C.SPLIT_RUN
