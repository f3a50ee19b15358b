/*
 * slurmguard-gate-client: the PrologSlurmctld fast path (docs/serve.md, "Gate fast path").
 *
 *   slurmguard-gate-client [--socket PATH] [--timeout SEC] [--dry-run] -- FALLBACK ARGV...
 *
 * Asks `slurmguard serve` on its gate socket (serve.gate_socket) for the job's verdict:
 * serve runs slurmguard.gate.answer.answer_job, the function `slurmguard gate` runs, with the store
 * it already holds open. Prints serve's log lines to stderr (slurmctld's log) and exits with
 * the gate's code: 0 run, 1 refused nodes were drained, 5 store unreadable with
 * gate.on_store_error = "closed".
 *
 * When serve does not answer (no socket, refused, slow, malformed, a refusal such as another
 * config file), execs FALLBACK (`slurmguard gate`), which reads the store itself and applies
 * the same gate.on_store_error: one definition, one answer.
 *
 * Environment: SLURM_JOB_ID, SLURM_JOB_NODELIST (set by slurmctld), SLURMGUARD_CONFIG,
 * SLURMGUARD_GATE_SOCKET (default /run/slurmguard/gate.sock), SLURMGUARD_GATE_TIMEOUT (2 s).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PROTO "SGG1"
#define MAX_ANSWER (1 << 20)

static char **fallback_argv;

static double now_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fall_back(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fall_back(const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "slurmguard-gate-client: serve not used (%s); running slurmguard gate\n", why);
	if (fallback_argv && fallback_argv[0]) {
		fflush(NULL);
		execv(fallback_argv[0], fallback_argv);
		fprintf(stderr, "slurmguard-gate-client: cannot run %s: %s; allowing the job\n",
			fallback_argv[0], strerror(errno));
	}
	exit(0);
}

static int safe(const char *v)
{
	for (const unsigned char *p = (const unsigned char *)v; *p; p++)
		if (*p <= ' ' || *p == 0x7f)
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	const char *sock = getenv("SLURMGUARD_GATE_SOCKET");
	const char *tmo = getenv("SLURMGUARD_GATE_TIMEOUT");
	int dry = 0;
	double t0 = now_mono();

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			fallback_argv = argv + i + 1;
			break;
		} else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
			sock = argv[++i];
		} else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
			tmo = argv[++i];
		} else if (strcmp(argv[i], "--dry-run") == 0) {
			dry = 1;
		} else {
			fall_back("unknown argument %.40s", argv[i]);
		}
	}
	sock = sock && *sock ? sock : "/run/slurmguard/gate.sock";
	double timeout = tmo ? strtod(tmo, NULL) : 2.0;
	if (!(timeout >= 0.01 && timeout <= 60))
		timeout = 2.0;
	const char *job = getenv("SLURM_JOB_ID"), *nodes = getenv("SLURM_JOB_NODELIST");
	const char *config = getenv("SLURMGUARD_CONFIG");
	job = job ? job : "";
	nodes = nodes ? nodes : "";
	config = config ? config : "";
	if (!safe(job) || !safe(nodes) || !safe(config))
		fall_back("a request value holds a space or control character");
	size_t need = strlen(job) + strlen(nodes) + strlen(config) + 64;
	char *req = malloc(need);
	if (!req)
		fall_back("out of memory");
	int rl = snprintf(req, need, PROTO " job=%s nodes=%s dry=%d config=%s\n", job, nodes, dry, config);

	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof addr.sun_path)
		fall_back("socket path too long");
	memcpy(addr.sun_path, sock, strlen(sock) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		fall_back("socket: %s", strerror(errno));
	if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0)
		fall_back("connect %s: %s", sock, strerror(errno));

	char *buf = malloc(MAX_ANSWER + 1);
	size_t have = 0, sent = 0;
	if (!buf)
		fall_back("out of memory");
	for (;;) {
		double left = timeout - (now_mono() - t0);
		if (left <= 0)
			fall_back("no whole answer within %.2fs", timeout);
		struct pollfd pfd = { .fd = fd, .events = sent < (size_t)rl ? POLLOUT : POLLIN };
		int pr = poll(&pfd, 1, (int)(left * 1000) + 1);
		if (pr < 0 && errno != EINTR)
			fall_back("poll: %s", strerror(errno));
		if (pr <= 0)
			continue;
		if (sent < (size_t)rl) {
			ssize_t w = send(fd, req + sent, (size_t)rl - sent, MSG_NOSIGNAL);
			if (w < 0) {
				if (errno == EAGAIN || errno == EINTR)
					continue;
				fall_back("send: %s", strerror(errno));
			}
			sent += (size_t)w;
			continue;
		}
		ssize_t r = read(fd, buf + have, MAX_ANSWER - have);
		if (r < 0) {
			if (errno == EAGAIN || errno == EINTR)
				continue;
			fall_back("read: %s", strerror(errno));
		}
		if (r == 0)
			break;
		have += (size_t)r;
		if (have >= MAX_ANSWER)
			fall_back("answer too long");
	}
	close(fd);
	buf[have] = 0;
	char *nl = memchr(buf, '\n', have);
	if (!nl)
		fall_back("answer cut short (no header)");
	*nl = 0;
	if (strncmp(buf, PROTO " unavailable", strlen(PROTO " unavailable")) == 0)
		fall_back("serve refused: %.300s", buf + strlen(PROTO " unavailable "));
	int code = -1;
	unsigned long le = 0;
	char tail[2];
	if (sscanf(buf, PROTO " %d %lu%1s", &code, &le, tail) != 2)
		fall_back("malformed answer header");
	if (code != 0 && code != 1 && code != 5)
		fall_back("answer has exit code %d", code);
	size_t body = (size_t)(nl + 1 - buf), trailer = strlen(PROTO " END\n");
	if (le > MAX_ANSWER || body + le + trailer != have || memcmp(buf + body + le, PROTO " END\n", trailer) != 0)
		fall_back("answer cut short or malformed");
	size_t off = 0;
	while (off < le) {
		ssize_t w = write(2, buf + body + off, le - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	return code;
}
