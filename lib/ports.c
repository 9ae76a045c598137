/*
 * ports.c — loopback TCP ports for a kernel that cannot use ipc (Deno's
 * channels), chosen by the system (bind to port 0) and all distinct: each
 * is held bound until the last is chosen, for a port given back at once can
 * be chosen again (bind(0) picks at random in the ephemeral range: of five
 * picks given back one by one, about one set in 1,400 repeats a port; the
 * kernel then fails to bind its second channel and its start fails).
 */
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib.h"

/* n free, distinct loopback ports in ports[]: 0, or -errno (none left open). */
int
ports_free(int *ports, size_t n)
{
	int held[16], rc = 0;
	size_t i;

	if (n > sizeof(held) / sizeof(held[0]))
		return -EINVAL;
	for (i = 0; i < n; i++) {
		struct sockaddr_in a = {.sin_family = AF_INET};
		socklen_t len = sizeof(a);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if ((held[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
		    bind(held[i], (struct sockaddr *)&a, sizeof(a)) < 0 ||
		    getsockname(held[i], (struct sockaddr *)&a, &len) < 0) {
			rc = -errno;
			if (held[i] >= 0)
				close(held[i]);
			break;
		}
		ports[i] = ntohs(a.sin_port);
	}
	while (i > 0)
		close(held[--i]);
	return rc;
}
