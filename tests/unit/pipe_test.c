/*
 * pipe_test.c — proto/pipe.c: messages over a plain stream socket (the envd
 * proxy and its agent): a round trip, the other end's close, and frames that
 * must be refused (a length over the limit, bytes that do not decode).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../proto/proto.h"

static int sv[2];

static void
pair(void)
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
}

static void
unpair(void)
{
	close(sv[0]);
	close(sv[1]);
}

TestSuite(pipe, .init = pair, .fini = unpair);

Test(pipe, an_envd_request_and_its_bytes_round_trip)
{
	static const char bytes[] = {0, 1, 2, (char)255};
	struct msg m, got;

	msg_init(&m, MSG_ENVD);
	msg_set_u64(&m, F_REQ, 7);
	msg_set_str(&m, F_TEXT, "write", 5);
	msg_set_str(&m, F_CODE, "{\"path\":\"a\"}", 12);
	msg_set_str(&m, F_DATA, bytes, sizeof(bytes));
	cr_assert_eq(pipe_send(sv[0], &m), 0);
	msg_free(&m);
	cr_assert_eq(pipe_recv(sv[1], &got), 0);
	cr_assert_eq(got.m_type, MSG_ENVD);
	cr_assert_eq(got.m_req, 7);
	cr_assert_str_eq(got.m_text.s, "write");
	cr_assert_eq(got.m_data.len, sizeof(bytes));
	cr_assert_arr_eq(got.m_data.s, bytes, sizeof(bytes));
	msg_free(&got);
}

Test(pipe, the_other_ends_close_is_epipe)
{
	struct msg got;

	close(sv[0]);
	sv[0] = -1;
	cr_assert_eq(pipe_recv(sv[1], &got), -EPIPE);
}

Test(pipe, a_length_over_the_frame_limit_is_refused_unread)
{
	unsigned char head[4] = {0xff, 0xff, 0xff, 0xff};
	struct msg got;

	cr_assert_eq(write(sv[0], head, 4), 4);
	cr_assert_eq(pipe_recv(sv[1], &got), -EMSGSIZE);
}

Test(pipe, bytes_that_do_not_decode_are_refused)
{
	unsigned char frame[7] = {0, 0, 0, 3, 0x92, 0x7f, 0x80}; /* no such type */
	struct msg got;

	cr_assert_eq(write(sv[0], frame, sizeof(frame)), (ssize_t)sizeof(frame));
	cr_assert_eq(pipe_recv(sv[1], &got), -EBADMSG);
}
