/*
 * peerbox_test.c — lib/peerbox.c: a peer under more seccomp filters than we
 * are is in a box, as is one that cannot be looked at; a TCP socket's owner
 * found by its inode; nothing is refused while it is off.
 */
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#include "../../lib/lib.h"

/* A child that stacks one allow-all filter more than ours (boxed) or none,
 * then holds what it inherited until killed; its pid. */
static pid_t
child_of(bool boxed)
{
	int p[2];
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	if ((pid = fork()) == 0) {
		struct sock_filter f[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
		struct sock_fprog prog = {1, f};
		char c = !boxed || (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
		                    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0,
		                          0) == 0)
		             ? 'y'
		             : 'n';
		(void)!write(p[1], &c, 1);
		pause();
		_exit(0);
	}
	char c = 0;
	cr_assert_eq(read(p[0], &c, 1), 1);
	cr_assert_eq(c, 'y', "the child could not install its filter");
	close(p[0]);
	close(p[1]);
	return pid;
}

static pid_t
boxed_child(void)
{
	return child_of(true);
}

static void
reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

Test(peerbox, off_it_refuses_no_one)
{
	pid_t child = boxed_child();
	cr_assert_not(peerbox_boxed(child));
	cr_assert_not(peerbox_boxed(0));
	cr_assert_not(peerbox_socket_boxed(1));
	reap(child);
}

Test(peerbox, a_peer_with_one_filter_more_is_boxed)
{
	peerbox_on();
	pid_t child = boxed_child();
	cr_assert(peerbox_boxed(child));
	cr_assert_not(peerbox_boxed(getpid()), "ourselves, as many filters as we have");
	cr_assert(peerbox_boxed(0), "a peer of another PID namespace");
	reap(child);
	cr_assert(peerbox_boxed(child), "a peer gone");
}

/* A loopback connection: the child holds the client's end, a box's socket. */
Test(peerbox, a_tcp_socket_is_its_holders)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
	struct stat st;

	peerbox_on();
	cr_assert(l >= 0 && c >= 0);
	cr_assert_eq(bind(l, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(l, 1), 0);
	cr_assert_eq(getsockname(l, (struct sockaddr *)&a, &al), 0);
	cr_assert_eq(connect(c, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(fstat(c, &st), 0);
	/* we hold it as well, but we are never its holder: the child is */
	pid_t child = child_of(false);
	cr_assert_not(peerbox_socket_boxed(st.st_ino), "a holder outside any box");
	reap(child);
	child = boxed_child();
	cr_assert(peerbox_socket_boxed(st.st_ino), "a holder in a box");
	reap(child);
	cr_assert(peerbox_socket_boxed(st.st_ino),
	          "no holder but us: not taken on trust");
	close(c);
	close(l);
}
