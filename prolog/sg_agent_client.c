/*
 * slurmguard-agent-client: the thin hook client (docs/agent.md).
 *
 *   slurmguard-agent-client [--socket PATH] [--timeout SEC] [--boot-id-path PATH]
 *                           HOOK [--json] [--dry-run] -- FALLBACK ARGV...
 *
 * Asks the resident agent (`slurmguard agent`) on its unix socket to run HOOK (prolog,
 * epilog, healthcheck) now, prints what the agent's run printed and exits with its exit code.
 * The agent runs the same code as `slurmguard HOOK` (slurmguard/node/hooks.py:execute), drain and
 * blast-radius permit included, so the verdict, the reason and the drain are one definition.
 *
 * When the agent is absent (no socket, connection refused), slow or hung (no whole answer
 * within --timeout), refuses (config or boot mismatch), answers for another boot than this
 * node's current one, or answers anything malformed, the client execs FALLBACK (the
 * in-process `slurmguard HOOK`) with SLURMGUARD_HOOK_STARTED set, so the in-process run
 * keeps to what is left of hooks.budget. The client never exits non-zero on its own: a
 * fault of slurmguard never fails a job or drains a node.
 *
 * Defaults come from the environment (the entry scripts read /etc/default/slurmguard):
 * SLURMGUARD_AGENT_SOCKET (/run/slurmguard/agent.sock), SLURMGUARD_AGENT_TIMEOUT (2 s),
 * SLURMGUARD_BOOT_ID_PATH (/proc/sys/kernel/random/boot_id); %n in a path = $SLURMD_NODENAME.
 * The request carries SLURMD_NODENAME, SLURM_JOB_ID, SLURM_JOB_UID and SLURMGUARD_CONFIG.
 */
#define _GNU_SOURCE
#include <stdarg.h>

#include "sg_client_common.h"

#define PROTO "SGA1"
#define MAX_ANSWER (4 << 20)

static double started;

static void fall_back(const char *fmt, ...)
{
	char why[512], when[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "slurmguard-agent-client: agent not used (%s); running the hook in-process\n", why);
	if (!getenv("SLURMGUARD_HOOK_STARTED")) {
		snprintf(when, sizeof when, "%.6f", started);
		setenv("SLURMGUARD_HOOK_STARTED", when, 1);
	}
	exec_fallback("slurmguard-agent-client");
}

/* Copy src to dst replacing %n by node; 0 on success. */
static int expand(char *dst, size_t n, const char *src, const char *node)
{
	size_t o = 0;
	for (const char *p = src; *p; p++) {
		const char *add = NULL;
		char one[2] = { *p, 0 };
		if (p[0] == '%' && p[1] == 'n') {
			add = node;
			p++;
		} else {
			add = one;
		}
		size_t l = strlen(add);
		if (o + l + 1 > n)
			return -1;
		memcpy(dst + o, add, l);
		o += l;
	}
	dst[o] = 0;
	return 0;
}

static void read_boot_id(const char *path, char *out, size_t n)
{
	FILE *f = fopen(path, "r");
	out[0] = 0;
	if (f) {
		if (!fgets(out, (int)n, f))
			out[0] = 0;
		fclose(f);
	}
	out[strcspn(out, "\r\n")] = 0;
	if (!out[0])
		snprintf(out, n, "unknown-boot");
}

int main(int argc, char **argv)
{
	struct timespec rt;
	const char *sock_t = getenv("SLURMGUARD_AGENT_SOCKET");
	const char *boot_t = getenv("SLURMGUARD_BOOT_ID_PATH");
	const char *tmo = getenv("SLURMGUARD_AGENT_TIMEOUT");
	const char *hook = NULL;
	int as_json = 0, dry = 0, i;

	clock_gettime(CLOCK_REALTIME, &rt);
	started = rt.tv_sec + rt.tv_nsec / 1e9;
	double t0 = now_mono();

	for (i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			fallback_argv = argv + i + 1;
			break;
		} else if (strcmp(argv[i], "--socket") == 0 && i + 1 < argc) {
			sock_t = argv[++i];
		} else if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc) {
			tmo = argv[++i];
		} else if (strcmp(argv[i], "--boot-id-path") == 0 && i + 1 < argc) {
			boot_t = argv[++i];
		} else if (strcmp(argv[i], "--json") == 0) {
			as_json = 1;
		} else if (strcmp(argv[i], "--dry-run") == 0) {
			dry = 1;
		} else if (!hook && (strcmp(argv[i], "prolog") == 0 || strcmp(argv[i], "epilog") == 0 ||
				     strcmp(argv[i], "healthcheck") == 0)) {
			hook = argv[i];
		} else {
			fall_back("unknown argument %.40s", argv[i]);
		}
	}
	if (!hook)
		fall_back("no hook named");

	const char *node = getenv("SLURMD_NODENAME");
	const char *job = getenv("SLURM_JOB_ID");
	const char *uid = getenv("SLURM_JOB_UID");
	const char *config = getenv("SLURMGUARD_CONFIG");
	node = node ? node : "";
	job = job ? job : "";
	uid = uid ? uid : "";
	config = config ? config : "";
	if (!safe(node) || !safe(job) || !safe(uid) || !safe(config))
		fall_back("a request value holds a space or control character");

	double timeout = tmo ? strtod(tmo, NULL) : 2.0;
	if (!(timeout >= 0.01 && timeout <= 60))
		timeout = 2.0;
	char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)], boot_path[4096], boot[128];
	if (expand(sock_path, sizeof sock_path, sock_t ? sock_t : "/run/slurmguard/agent.sock", node) ||
	    expand(boot_path, sizeof boot_path, boot_t ? boot_t : "/proc/sys/kernel/random/boot_id", node))
		fall_back("socket or boot id path too long");
	read_boot_id(boot_path, boot, sizeof boot);

	char req[8192];
	int rl = snprintf(req, sizeof req, PROTO " %s node=%s job=%s uid=%s boot=%s json=%d dry=%d config=%s started=%.6f\n",
			  hook, node, job, uid, boot, as_json, dry, config, started);
	if (rl < 0 || (size_t)rl >= sizeof req)
		fall_back("request too long");

	char *buf = malloc(MAX_ANSWER + 1);
	if (!buf)
		fall_back("out of memory");
	size_t have = exchange(sock_path, req, (size_t)rl, t0, timeout, buf, MAX_ANSWER);
	size_t body = answer_header(buf, have, PROTO, "agent");
	int code = -1;
	unsigned long lo = 0, le = 0;
	char aboot[128], tail[2];
	if (sscanf(buf, PROTO " %d %127s %lu %lu%1s", &code, aboot, &lo, &le, tail) != 4)
		fall_back("malformed answer header");
	if (code != 0 && code != 1)
		fall_back("answer has exit code %d", code);
	if (strcmp(aboot, boot) != 0)
		fall_back("agent answered for boot %.40s, this node is in boot %.40s", aboot, boot);
	if (lo > MAX_ANSWER || le > MAX_ANSWER || !framed(buf, have, body, lo + le, PROTO))
		fall_back("answer cut short or malformed");
	/* stdout/stderr gone (slurmd closed them): the verdict still stands */
	(void)(write_all(1, buf + body, lo) || write_all(2, buf + body + lo, le));
	return code;
}
