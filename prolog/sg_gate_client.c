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
#include <stdarg.h>

#include "sg_client_common.h"

#define PROTO "SGG1"
#define MAX_ANSWER (1 << 20)

static void fall_back(const char *fmt, ...)
{
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	fprintf(stderr, "slurmguard-gate-client: serve not used (%s); running slurmguard gate\n", why);
	exec_fallback("slurmguard-gate-client");
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

	char *buf = malloc(MAX_ANSWER + 1);
	if (!buf)
		fall_back("out of memory");
	size_t have = exchange(sock, req, (size_t)rl, t0, timeout, buf, MAX_ANSWER);
	size_t body = answer_header(buf, have, PROTO, "serve");
	int code = -1;
	unsigned long le = 0;
	char tail[2];
	if (sscanf(buf, PROTO " %d %lu%1s", &code, &le, tail) != 2)
		fall_back("malformed answer header");
	if (code != 0 && code != 1 && code != 5)
		fall_back("answer has exit code %d", code);
	if (le > MAX_ANSWER || !framed(buf, have, body, le, PROTO))
		fall_back("answer cut short or malformed");
	(void)write_all(2, buf + body, le); /* slurmctld's log gone: the verdict still stands */
	return code;
}
