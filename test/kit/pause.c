/*
 * The pause program of the kit's stand-in sandbox images (registry.k8s.io/pause:3.9,
 * pause:3.10, pause:3.10.2; test/kit/images.sh): the process a pod's infra container
 * runs. It waits for signals: SIGTERM and SIGINT end it with status 0, SIGCHLD reaps
 * every child that exited (orphans re-parented to it as a pid namespace's init), and
 * every other signal is taken and dropped. `pause -v` prints its name and exits.
 *
 * The project's own code, not Kubernetes' pause.c. Built static (no loader in the
 * image): cc -static -Os -s -o pause pause.c
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char version[] = "crijournal test kit pause\n";

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

int main(int argc, char **argv)
{
	sigset_t all;

	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		return write(STDOUT_FILENO, version, sizeof version - 1) == (ssize_t)(sizeof version - 1) ? 0 : 1;
	}
	/* Blocked, every signal waits for sigwait below and none has its default action. */
	sigfillset(&all);
	if (sigprocmask(SIG_BLOCK, &all, NULL) != 0)
		return 1;
	reap(); /* anything that died before the signals were blocked */
	for (;;) {
		int sig;
		if (sigwait(&all, &sig) != 0)
			return 1; /* rather than spin */
		switch (sig) {
		case SIGTERM:
		case SIGINT:
			return 0;
		case SIGCHLD:
			reap();
			break;
		default:
			break;
		}
	}
}
