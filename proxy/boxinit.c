/*
 * boxinit.c — the life of a box's init (its PID 1) once its kernel runs: reap
 * orphans, report the kernel's wait status on fd 3 and end, and with it the
 * box. Run by a cold box's init (sandbox.c), and by sandcell-init (init.c),
 * which a box forked from the template executes in place of that fork.
 * Raw system calls only: it runs between clone and exec in the proxy.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proxy.h"

/* The init is in a Landlock domain of its box's own (sandbox.c, no namespaces). */
bool boxinit_scoped;

/*
 * With watch, also end when the proxy's end of fd 3 closes: a box forked
 * from the template is not the proxy's child, so PR_SET_PDEATHSIG cannot do it.
 */
void __attribute__((noreturn))
boxinit_wait(pid_t kid, bool watch)
{
	struct pollfd pf[2] = {{3, POLLRDHUP, 0}, {-1, POLLIN, 0}};
	struct signalfd_siginfo si;
	sigset_t chld;
	int status;
	pid_t pid;

	if (watch) { /* a SIGCHLD, or the proxy's end closing, wakes us */
		sigemptyset(&chld);
		sigaddset(&chld, SIGCHLD);
		sigprocmask(SIG_BLOCK, &chld, NULL);
		if ((pf[1].fd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
			_exit(127);
	}
	for (;;) {
		if (watch) {
			while ((pid = waitpid(-1, &status, WNOHANG)) == 0) {
				if (poll(pf, 2, -1) > 0 &&
				    (pf[0].revents & (POLLRDHUP | POLLHUP | POLLERR))) {
					if (boxinit_scoped) /* what no PID namespace ends */
						kill(-1, SIGKILL);
					_exit(0); /* the proxy is gone: so is the box */
				}
				while (read(pf[1].fd, &si, sizeof(si)) == sizeof(si))
					;
			}
		} else {
			pid = wait(&status);
		}
		if (pid == kid) {
			int rc = send(3, &status, sizeof(status), 0) < 0 ? 124 : 0;
			/* no PID namespace ends what the kernel left: its domain is ours */
			if (boxinit_scoped)
				kill(-1, SIGKILL);
			_exit(rc);
		}
		if (pid < 0 && errno == ECHILD)
			_exit(127);
	}
}
