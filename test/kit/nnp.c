/*
 * The program of the kit's stand-in for registry.k8s.io/e2e-test-images/nonewprivs
 * (test/kit/images.sh): installed setuid root in the image, it prints its effective
 * user ID. critest's NoNewPrivs specs run it as user 1000 and read "Effective uid: 0"
 * when the setuid bit took effect, "Effective uid: 1000" under no_new_privs.
 *
 * The project's own code. Built static: cc -static -Os -s -o nnp nnp.c
 */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
	if (printf("Effective uid: %d\n", (int)geteuid()) < 0 || fflush(stdout) != 0)
		return 1;
	return 0;
}
