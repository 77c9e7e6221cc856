package residency

/*
#define _GNU_SOURCE
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

// advise_random advises MADV_RANDOM on the program's read-only, not executable, loadable
// segments (the kernel ignores it for executable ones), and sets *data to the end of the
// loaded part of the file.
static int advise_random(struct dl_phdr_info *info, size_t size, void *data) {
	unsigned long page = (unsigned long)sysconf(_SC_PAGESIZE);
	off_t *loaded = data;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type == PT_LOAD && (off_t)(ph->p_offset + ph->p_filesz) > *loaded)
			*loaded = ph->p_offset + ph->p_filesz;
		if (ph->p_type != PT_LOAD || (ph->p_flags & (PF_W | PF_X)) != 0)
			continue;
		unsigned long start = (info->dlpi_addr + ph->p_vaddr) & ~(page - 1);
		unsigned long end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
		madvise((void *)start, end - start, MADV_RANDOM);
	}
	return 1; // the first object is the program; the libraries are not ours
}

// crijournal_residency runs before the Go runtime starts (glibc passes init_array
// functions argc and argv). Failures change nothing but the memory figures: ignored.
__attribute__((constructor)) static void crijournal_residency(int argc, char **argv) {
	off_t loaded = 0;
	dl_iterate_phdr(advise_random, &loaded);
	if (argc == 1 || strcmp(argv[1], "serve") == 0) { // crijournal serves without a subcommand
		int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			// Dirty pages are not dropped: a binary just built or installed may not be
			// written back yet. Write them back first (nothing to do for a clean file).
			sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
			posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
			// Read the loaded part back at once, in small folios (read-ahead asked for
			// does not make large ones), rather than a page a fault.
			posix_fadvise(fd, 0, loaded, POSIX_FADV_WILLNEED);
			close(fd);
		}
	}
}
*/
import "C"
