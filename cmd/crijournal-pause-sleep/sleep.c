/*
 * crijournal-pause-sleep is what the pause process (cmd/crijournal-pause, package
 * internal/pause) becomes once it has confined itself: it executes this program, which
 * keeps its namespaces, root, user, capabilities, no-new-privileges and seccomp filter,
 * and needs a few hundred KiB of memory where the Go program needs a few MiB.
 *
 * It behaves as the Go program's loop did: it reaps every child it is handed (orphans of
 * the pod's containers) and exits with status 0 on SIGTERM or SIGINT; every other signal
 * is taken and dropped (SIGHUP, SIGQUIT and SIGABRT stay ignored, as the Go program left
 * them). Once its signals are blocked it writes "ready\n" on file descriptor 3, the
 * ready pipe of package pause (pause.ReadyFD, pause.Ready), and closes it; if it cannot,
 * or cannot wait for signals, it exits with status 1.
 *
 * It makes only the system calls the pause process's seccomp filter allows (see
 * internal/pause/filter.go), and is built static (make build: cc -static -Os) since it
 * starts in an empty root, with no dynamic loader. Run by hand it does nothing useful.
 */
#include <errno.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The ready pipe: pause.ReadyFD and pause.Ready. */
#define READY_FD 3
static const char ready[] = "ready\n";

/* Every signal, as the kernel counts them (glibc's sigset_t helpers leave out the two
 * it keeps for itself, which a signal from the node could then use to kill the process). */
static const unsigned long all_signals = ~0UL;

/* reap waits for every child that has exited, without blocking. */
static void reap(void)
{
	for (;;) {
		pid_t pid = waitpid(-1, NULL, WNOHANG);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid <= 0)
			return;
	}
}

int main(void)
{
	/* Blocked, every signal waits in the queue for sigtimedwait below, even those the
	 * kernel would drop for a namespace's init, and none has its default action. */
	if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all_signals, NULL, sizeof all_signals) != 0)
		return 1;
	reap(); /* anything that died before the signals were blocked */
	if (write(READY_FD, ready, sizeof ready - 1) != (ssize_t)(sizeof ready - 1))
		return 1;
	close(READY_FD);
	for (;;) {
		long sig = syscall(SYS_rt_sigtimedwait, &all_signals, NULL, NULL, sizeof all_signals);
		if (sig < 0 && errno == EINTR)
			continue;
		if (sig < 0)
			return 1; /* rather than spin */
		switch (sig) {
		case SIGCHLD:
			reap();
			break;
		case SIGTERM:
		case SIGINT:
			return 0;
		}
	}
}
