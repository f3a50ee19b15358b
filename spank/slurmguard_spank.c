/*
 * slurmguard SPANK plugin: --guard-* options for sbatch/salloc/srun.
 *
 *   --guard-checkpoint-dir=DIR   absolute path of an existing directory
 *   --guard-resume=auto|off      resume from the newest complete checkpoint, or not
 *   --guard-max-requeues=N       infrastructure requeues allowed (0..10000)
 *   --guard-notice-signal=SIG    signal sent to the program on a drain notice (none, USR1,
 *                                USR2, INT, TERM; docs/requeue.md)
 *
 * Values are validated where the user types them (sbatch/salloc: allocator context, srun:
 * local context), so a bad value refuses the submission with one clear line. In the job
 * (slurmstepd, remote context) the values are exported as SLURMGUARD_CHECKPOINT_DIR,
 * SLURMGUARD_RESUME, SLURMGUARD_MAX_REQUEUES and SLURMGUARD_NOTICE_SIGNAL, which `slurmguard
 * run` reads exactly like its --checkpoint-dir/--resume/--max-requeues/--notice-signal flags.
 * See docs/spank.md.
 *
 * Why the remote side only re-checks syntax: slurmstepd runs these callbacks before dropping
 * privileges and the directory may live on a file system the compute node mounts differently;
 * `slurmguard run` checks the directory again as the user.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <slurm/spank.h>

SPANK_PLUGIN(slurmguard, 1);

#define OPT_DIR 1
#define OPT_RESUME 2
#define OPT_MAXRQ 3
#define OPT_SIGNAL 4
#define MAX_REQUEUES_LIMIT 10000

static char ckpt_dir[PATH_MAX];
static char resume[8];
static char max_requeues[16];
static char notice_signal[8];

static int opt_cb(int val, const char *optarg, int remote);

static struct spank_option guard_options[] = {
	{ "guard-checkpoint-dir", "DIR",
	  "slurmguard: absolute path of the job's checkpoint directory (must exist); "
	  "the job resumes from its newest complete checkpoint",
	  1, OPT_DIR, opt_cb },
	{ "guard-resume", "auto|off",
	  "slurmguard: resume from the newest complete checkpoint (auto, default) or not (off)",
	  1, OPT_RESUME, opt_cb },
	{ "guard-max-requeues", "N",
	  "slurmguard: requeue the job at most N times after infrastructure faults",
	  1, OPT_MAXRQ, opt_cb },
	{ "guard-notice-signal", "none|USR1|USR2|INT|TERM",
	  "slurmguard: signal to send the program when a node of the job is drained (it should "
	  "checkpoint now); USR1 by convention, none by default",
	  1, OPT_SIGNAL, opt_cb },
	SPANK_OPTIONS_TABLE_END
};

/* One line, printed by sbatch/srun before it refuses the submission. */
#define REFUSE(...) do { slurm_error(__VA_ARGS__); return -1; } while (0)

static int check_dir(const char *arg, int remote)
{
	struct stat st;

	if (arg == NULL || arg[0] == '\0')
		REFUSE("slurmguard: --guard-checkpoint-dir: expected a directory, got an empty value");
	if (strlen(arg) >= sizeof(ckpt_dir))
		REFUSE("slurmguard: --guard-checkpoint-dir: path longer than %d bytes", PATH_MAX - 1);
	if (arg[0] != '/')
		REFUSE("slurmguard: --guard-checkpoint-dir: expected an absolute path, got \"%s\"", arg);
	if (strchr(arg, '\n') != NULL)
		REFUSE("slurmguard: --guard-checkpoint-dir: newline in path");
	if (!remote) {
		if (stat(arg, &st) != 0)
			REFUSE("slurmguard: --guard-checkpoint-dir: %s: %s", arg, strerror(errno));
		if (!S_ISDIR(st.st_mode))
			REFUSE("slurmguard: --guard-checkpoint-dir: %s: not a directory", arg);
	}
	strcpy(ckpt_dir, arg);
	return 0;
}

static int check_resume(const char *arg)
{
	if (arg == NULL || (strcmp(arg, "auto") != 0 && strcmp(arg, "off") != 0))
		REFUSE("slurmguard: --guard-resume: expected auto or off, got \"%s\"", arg ? arg : "");
	strcpy(resume, arg);
	return 0;
}

static int check_notice_signal(const char *arg)
{
	static const char *const names[] = { "none", "USR1", "USR2", "INT", "TERM", NULL };
	int i;

	for (i = 0; arg != NULL && names[i] != NULL; i++) {
		if (strcmp(arg, names[i]) == 0) {
			strcpy(notice_signal, arg);
			return 0;
		}
	}
	REFUSE("slurmguard: --guard-notice-signal: expected none, USR1, USR2, INT or TERM, "
	       "got \"%.32s\"", arg ? arg : "");
}

static int check_max_requeues(const char *arg)
{
	char *end = NULL;
	long n;

	if (arg == NULL || arg[0] == '\0')
		REFUSE("slurmguard: --guard-max-requeues: expected a count, got an empty value");
	errno = 0;
	n = strtol(arg, &end, 10);
	if (errno != 0 || end == arg || *end != '\0')
		REFUSE("slurmguard: --guard-max-requeues: expected a count, got \"%s\"", arg);
	if (n < 0)
		REFUSE("slurmguard: --guard-max-requeues: must not be negative, got %ld", n);
	if (n > MAX_REQUEUES_LIMIT)
		REFUSE("slurmguard: --guard-max-requeues: at most %d, got %ld", MAX_REQUEUES_LIMIT, n);
	snprintf(max_requeues, sizeof(max_requeues), "%ld", n);
	return 0;
}

static int opt_cb(int val, const char *optarg, int remote)
{
	switch (val) {
	case OPT_DIR:
		return check_dir(optarg, remote);
	case OPT_RESUME:
		return check_resume(optarg);
	case OPT_MAXRQ:
		return check_max_requeues(optarg);
	case OPT_SIGNAL:
		return check_notice_signal(optarg);
	}
	return -1;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	struct spank_option *o;

	(void) ac;
	(void) av;
	/* Registered in every context: sbatch/salloc (allocator) only sees options registered
	 * here, and slurmstepd must know them to receive their values. */
	for (o = guard_options; o->name != NULL; o++) {
		spank_err_t rc = spank_option_register(sp, o);
		if (rc != ESPANK_SUCCESS) {
			slurm_error("slurmguard: cannot register --%s: %s", o->name, spank_strerror(rc));
			return -1;
		}
	}
	return 0;
}

static int export(spank_t sp, const char *var, const char *val)
{
	spank_err_t rc;

	if (val[0] == '\0')
		return 0;
	rc = spank_setenv(sp, var, val, 1);
	if (rc != ESPANK_SUCCESS) {
		slurm_error("slurmguard: cannot set %s in the job: %s", var, spank_strerror(rc));
		return -1;
	}
	return 0;
}

/* Remote context, once per step, after the options were processed: the job environment. */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	(void) ac;
	(void) av;
	if (!spank_remote(sp))
		return 0;
	if (export(sp, "SLURMGUARD_CHECKPOINT_DIR", ckpt_dir) ||
	    export(sp, "SLURMGUARD_RESUME", resume) ||
	    export(sp, "SLURMGUARD_MAX_REQUEUES", max_requeues) ||
	    export(sp, "SLURMGUARD_NOTICE_SIGNAL", notice_signal))
		return -1;
	return 0;
}
