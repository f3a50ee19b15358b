/*
 * sg_client_common.h: what the two fast-path clients share (sg_agent_client.c asks
 * `slurmguard agent`, sg_gate_client.c asks `slurmguard serve`'s gate socket).
 *
 * Both speak one line to a local unix socket and read back a framed answer
 *
 *     <PROTO> <fields...>\n<bodies><PROTO> END\n      or      <PROTO> unavailable <why>\n
 *
 * within a time limit, and both fall back to the in-process command (exec FALLBACK ARGV)
 * whenever anything is off: a fault of slurmguard never fails a job or drains a node.
 * Static functions, included by each client (one translation unit each, no library); the
 * client defines fall_back(), which formats its own message and ends in exec_fallback().
 */
#ifndef SG_CLIENT_COMMON_H
#define SG_CLIENT_COMMON_H

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static char **fallback_argv; /* FALLBACK ARGV: what follows "--" on the command line */

/* Defined by each client: say why (to stderr, slurmd's or slurmctld's log), then exec_fallback. */
static void fall_back(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

static double now_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Run FALLBACK ARGV in place of this process; if that fails, allow the job (exit 0). */
static void exec_fallback(const char *client) __attribute__((noreturn));
static void exec_fallback(const char *client)
{
	if (fallback_argv && fallback_argv[0]) {
		fflush(NULL);
		execv(fallback_argv[0], fallback_argv);
		fprintf(stderr, "%s: cannot run %s: %s; allowing the job\n", client,
			fallback_argv[0], strerror(errno));
	} else {
		fprintf(stderr, "%s: no fallback command; allowing the job\n", client);
	}
	exit(0);
}

/* A request value may not hold a space, a newline or anything unprintable. */
static int safe(const char *v)
{
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p <= ' ' || *p == 0x7f)
			return 0;
	return 1;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/*
 * Connect to the unix socket at path, send req (rl bytes) and read the whole answer (until the
 * server closes) into buf (max bytes, NUL-terminated), all before t0 + timeout (monotonic).
 * Returns the answer's length; falls back on any failure.
 */
static size_t exchange(const char *path, const char *req, size_t rl, double t0, double timeout,
		       char *buf, size_t max)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	size_t have = 0, sent = 0;

	if (strlen(path) >= sizeof addr.sun_path)
		fall_back("socket path too long");
	memcpy(addr.sun_path, path, strlen(path) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		fall_back("socket: %s", strerror(errno));
	/* A unix socket connects at once or not at all (EAGAIN: the server's backlog is full). */
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
		fall_back("connect %s: %s", path, strerror(errno));
	for (;;) {
		double left = timeout - (now_mono() - t0);
		if (left <= 0)
			fall_back("no whole answer within %.2fs", timeout);
		struct pollfd pfd = { .fd = fd, .events = sent < rl ? POLLOUT : POLLIN };
		int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
		if (pr < 0) {
			if (errno == EINTR)
				continue;
			fall_back("poll: %s", strerror(errno));
		}
		if (pr == 0)
			continue;
		if (sent < rl) {
			ssize_t w = send(fd, req + sent, rl - sent, MSG_NOSIGNAL);
			if (w < 0) {
				if (errno == EAGAIN || errno == EINTR)
					continue;
				fall_back("send: %s", strerror(errno));
			}
			sent += (size_t)w;
			continue;
		}
		ssize_t r = read(fd, buf + have, max - have);
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			fall_back("read: %s", strerror(errno));
		}
		if (r == 0)
			break;
		have += (size_t)r;
		if (have >= max)
			fall_back("answer too long");
	}
	close(fd);
	buf[have] = 0;
	return have;
}

/*
 * Cut the answer's header line (NUL-terminated in place) and return the offset of what
 * follows it; a refusal ("<proto> unavailable <why>") falls back naming the server.
 */
static size_t answer_header(char *buf, size_t have, const char *proto, const char *server)
{
	char refused[32];
	char *nl = memchr(buf, '\n', have);

	if (!nl)
		fall_back("answer cut short (no header)");
	*nl = 0;
	snprintf(refused, sizeof refused, "%s unavailable", proto);
	if (strncmp(buf, refused, strlen(refused)) == 0)
		fall_back("%s refused: %.300s", server, buf + strlen(refused) + (buf[strlen(refused)] ? 1 : 0));
	return (size_t)(nl + 1 - buf);
}

/* 1 when the bodies (total bytes from body) are followed by "<proto> END\n" and nothing else. */
static int framed(const char *buf, size_t have, size_t body, unsigned long total, const char *proto)
{
	char end[32];
	int tl = snprintf(end, sizeof end, "%s END\n", proto);

	return tl > 0 && total <= have && body + total + (size_t)tl == have &&
	       memcmp(buf + body + total, end, (size_t)tl) == 0;
}

#endif /* SG_CLIENT_COMMON_H */
