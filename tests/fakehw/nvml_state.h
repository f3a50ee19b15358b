/*
 * State and config loading of the stand-in libnvidia-ml.so.1 (included once, by libnvml.c):
 * NVML's types and return codes, the fake GPUs, and the JSON config reader. The format is
 * documented in docs/testing.md ("Stand-in NVML").
 */
#ifndef FAKE_NVML_STATE_H
#define FAKE_NVML_STATE_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "minijson.h"

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NO_PERMISSION = 4, NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7, NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_GPU_IS_LOST = 15, NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define MAX_LINKS 36 /* NVML_NVLINK_MAX_LINKS */
#define MAX_XIDS 64
#define MAX_FAULTS 32
#define MAX_EVENT_SETS 64
#define GPU_MAGIC 0x4e564d4cu
#define NVML_EVENT_XID 0x8ull /* nvmlEventTypeXidCriticalError */
#define SUPPORTED_EVENTS (0x1ull | 0x2ull | 0x8ull)

typedef struct {
    unsigned magic;
    int index; /* NVML index among GPUs present on the bus, -1 when fallen off */
    int lost;
    char name[96], uuid[96], bus_id[32], bus_id_legacy[16], serial[32];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    unsigned temp, t_shutdown, t_slowdown, t_mem_max, t_gpu_max;
    int ecc_current, ecc_pending;
    unsigned long long ecc[2][2]; /* [corrected, uncorrected][volatile, aggregate] */
    int retired_pending;
    unsigned retired_sbe, retired_dbe;
    unsigned remap_corr, remap_unc, remap_pending, remap_failure;
    unsigned long long clock_reasons;
    unsigned clock[4], max_clock[4]; /* MHz by nvmlClockType_t: graphics, sm, mem, video */
    int n_links, link_up[MAX_LINKS];
    unsigned pcie_width, pcie_max_width, pcie_gen, pcie_max_gen;
    int persistence;
    unsigned power_mw, power_limit_mw;
    int n_xids, xids[MAX_XIDS];
    int n_faults;
    char fault_field[MAX_FAULTS][32];
    int fault_code[MAX_FAULTS];
} fake_gpu;

typedef fake_gpu *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType, eventData;
    unsigned int gpuInstanceId, computeInstanceId;
} nvmlEventData_t;

typedef struct {
    int used;
    unsigned long long mask[MAX_GPUS];
    int cursor[MAX_GPUS];
} fake_event_set;
typedef fake_event_set *nvmlEventSet_t;

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refcount;
static char driver_version[80], nvml_version[80];
static int cuda_version;
static fake_gpu gpus[MAX_GPUS];
static int n_gpus;               /* slots in the config */
static int present[MAX_GPUS];    /* NVML index -> slot */
static int n_present;
static fake_event_set event_sets[MAX_EVENT_SETS];
static struct timespec config_mtime; /* of the file last loaded: waits notice a rewrite */
static char config_file[4096];

static const struct { int code; const char *name, *text; } errors[] = {
    {0, "SUCCESS", "Success"},
    {1, "UNINITIALIZED", "Uninitialized"},
    {2, "INVALID_ARGUMENT", "Invalid Argument"},
    {3, "NOT_SUPPORTED", "Not Supported"},
    {4, "NO_PERMISSION", "Insufficient Permissions"},
    {5, "ALREADY_INITIALIZED", "Already Initialized"},
    {6, "NOT_FOUND", "Not Found"},
    {7, "INSUFFICIENT_SIZE", "Insufficient Size"},
    {8, "INSUFFICIENT_POWER", "Insufficient External Power"},
    {9, "DRIVER_NOT_LOADED", "Driver Not Loaded"},
    {10, "TIMEOUT", "Timeout"},
    {11, "IRQ_ISSUE", "Interrupt request issue"},
    {12, "LIBRARY_NOT_FOUND", "NVML Shared Library Not Found"},
    {13, "FUNCTION_NOT_FOUND", "Function Not Found"},
    {14, "CORRUPTED_INFOROM", "Corrupted infoROM"},
    {15, "GPU_IS_LOST", "GPU is lost"},
    {16, "RESET_REQUIRED", "GPU requires restart"},
    {17, "OPERATING_SYSTEM", "The operating system has blocked the request."},
    {18, "LIB_RM_VERSION_MISMATCH", "RM has detected an NVML/RM version mismatch."},
    {19, "IN_USE", "In use by another client"},
    {20, "MEMORY", "Insufficient Memory"},
    {21, "NO_DATA", "No data"},
    {999, "UNKNOWN", "Unknown Error"},
};


/* An error given in the JSON: a number, or a name with or without the NVML_ERROR_ prefix. */
static int parse_code(const jnode *v) {
    if (!v) return NVML_SUCCESS;
    if (v->type == J_NUM) return (int)v->num;
    if (v->type == J_STR) {
        const char *s = v->str;
        if (strncmp(s, "NVML_ERROR_", 11) == 0) s += 11;
        for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
            if (strcmp(errors[i].name, s) == 0) return errors[i].code;
        return NVML_ERROR_UNKNOWN;
    }
    return NVML_SUCCESS; /* null / false: no fault */
}

static void copy_str(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src ? src : "");
}

static void add_fault(fake_gpu *g, const char *field, int code) {
    if (g->n_faults >= MAX_FAULTS || code == NVML_SUCCESS) return;
    copy_str(g->fault_field[g->n_faults], sizeof g->fault_field[0], field);
    g->fault_code[g->n_faults++] = code;
}

static void load_gpu(fake_gpu *g, const jnode *j, int slot) {
    const jnode *v, *e;
    unsigned d = 0, b = 0, dev = 0, fn = 0;
    memset(g, 0, sizeof *g);
    g->magic = GPU_MAGIC;
    copy_str(g->name, sizeof g->name, j_str(j, "name", "NVIDIA H100 80GB HBM3"));
    {
        char dflt[96];
        snprintf(dflt, sizeof dflt, "GPU-%08x-0000-4000-8000-%012x", 0x5a6e0000u + (unsigned)slot, (unsigned)slot);
        copy_str(g->uuid, sizeof g->uuid, j_str(j, "uuid", dflt));
    }
    copy_str(g->serial, sizeof g->serial, j_str(j, "serial", "1650923000000"));
    sscanf(j_str(j, "pci_bus_id", "00000000:00:00.0"), "%x:%x:%x.%x", &d, &b, &dev, &fn);
    g->domain = d; g->bus = b; g->device = dev;
    snprintf(g->bus_id, sizeof g->bus_id, "%08X:%02X:%02X.%X", d, b, dev, fn);
    snprintf(g->bus_id_legacy, sizeof g->bus_id_legacy, "%04X:%02X:%02X.%X", d & 0xffff, b & 0xff, dev & 0xff, fn & 0xf);
    g->pci_device_id = (unsigned)j_num(j, "pci_device_id", 0x233010DE);
    g->pci_subsystem_id = (unsigned)j_num(j, "pci_subsystem_id", 0x16C110DE);
    g->temp = (unsigned)j_num(j, "temperature", 34);
    g->t_shutdown = (unsigned)j_num(j, "temperature_shutdown", 92);
    g->t_slowdown = (unsigned)j_num(j, "temperature_slowdown", 89);
    g->t_gpu_max = (unsigned)j_num(j, "temperature_gpu_max", 87);
    g->t_mem_max = (unsigned)j_num(j, "temperature_mem_max", 95);
    g->ecc_current = j_bool(j, "ecc_mode", 1);
    g->ecc_pending = j_bool(j, "ecc_mode_pending", g->ecc_current);
    v = j_get(j, "ecc");
    g->ecc[0][0] = (unsigned long long)j_num(v, "volatile_corrected", 0);
    g->ecc[1][0] = (unsigned long long)j_num(v, "volatile_uncorrected", 0);
    g->ecc[0][1] = (unsigned long long)j_num(v, "aggregate_corrected", 0);
    g->ecc[1][1] = (unsigned long long)j_num(v, "aggregate_uncorrected", 0);
    v = j_get(j, "retired_pages");
    g->retired_pending = j_bool(v, "pending", 0);
    g->retired_sbe = (unsigned)j_num(v, "single_bit", 0);
    g->retired_dbe = (unsigned)j_num(v, "double_bit", 0);
    v = j_get(j, "remapped_rows");
    g->remap_corr = (unsigned)j_num(v, "correctable", 0);
    g->remap_unc = (unsigned)j_num(v, "uncorrectable", 0);
    g->remap_pending = (unsigned)j_bool(v, "pending", 0);
    g->remap_failure = (unsigned)j_bool(v, "failure", 0);
    g->clock_reasons = (unsigned long long)j_num(j, "clocks_event_reasons", 0x1 /* GpuIdle */);
    {
        /* H100 SXM5 maxima; the current clocks default to them (the stand-in models no load). */
        static const char *names[4] = {"graphics", "sm", "mem", "video"};
        static const unsigned dflt[4] = {1980, 1980, 2619, 1545};
        jnode *mx = j_get(j, "max_clocks"), *cur = j_get(j, "clocks");
        for (int k = 0; k < 4; k++) {
            g->max_clock[k] = (unsigned)j_num(mx, names[k], dflt[k]);
            g->clock[k] = (unsigned)j_num(cur, names[k], g->max_clock[k]);
        }
    }
    v = j_get(j, "nvlink");
    if (v && v->type == J_ARR) {
        g->n_links = j_len(v) < MAX_LINKS ? j_len(v) : MAX_LINKS;
        for (int i = 0; i < g->n_links; i++) {
            e = j_at(v, i);
            g->link_up[i] = e && (e->type == J_BOOL || e->type == J_NUM) && e->num != 0;
        }
    } else {
        g->n_links = 18;
        for (int i = 0; i < 18; i++) g->link_up[i] = 1;
    }
    v = j_get(j, "pcie");
    g->pcie_max_width = (unsigned)j_num(v, "max_width", 16);
    g->pcie_width = (unsigned)j_num(v, "width", g->pcie_max_width);
    g->pcie_max_gen = (unsigned)j_num(v, "max_gen", 5);
    g->pcie_gen = (unsigned)j_num(v, "gen", g->pcie_max_gen);
    g->persistence = j_bool(j, "persistence_mode", 1);
    g->power_mw = (unsigned)j_num(j, "power_usage_mw", 70000);
    g->power_limit_mw = (unsigned)j_num(j, "power_limit_mw", 700000);
    g->lost = j_bool(j, "lost", 0);
    v = j_get(j, "xid_events");
    for (e = v && v->type == J_ARR ? v->child : NULL; e && g->n_xids < MAX_XIDS; e = e->next)
        if (e->type == J_NUM) g->xids[g->n_xids++] = (int)e->num;
    v = j_get(j, "not_supported");
    for (e = v && v->type == J_ARR ? v->child : NULL; e; e = e->next)
        if (e->type == J_STR) add_fault(g, e->str, NVML_ERROR_NOT_SUPPORTED);
    v = j_get(j, "errors");
    for (e = v && v->type == J_OBJ ? v->child : NULL; e; e = e->next)
        add_fault(g, e->key, parse_code(e));
}

static int config_path(char *out, size_t n) {
    const char *p = getenv("FAKE_NVML_CONFIG"), *node = getenv("SLURMD_NODENAME");
    struct stat st;
    if (!p || !*p || stat(p, &st) != 0) return -1;
    if (!S_ISDIR(st.st_mode)) { copy_str(out, n, p); return 0; }
    if (node && *node && !strchr(node, '/')) {
        snprintf(out, n, "%s/%s.json", p, node);
        if (stat(out, &st) == 0) return 0;
    }
    snprintf(out, n, "%s/default.json", p);
    return stat(out, &st) == 0 ? 0 : -1;
}

/* (Re)load the config. No config: the driver is "not loaded"; a bad one: Unknown Error. */
static nvmlReturn_t load_config(void) {
    char path[4096];
    FILE *f;
    long size;
    char *text;
    const char *err = NULL;
    jnode *root, *list;
    int rc;

    if (config_path(path, sizeof path) != 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    f = fopen(path, "rb");
    if (!f) return NVML_ERROR_DRIVER_NOT_LOADED;
    {
        struct stat st;
        if (fstat(fileno(f), &st) == 0) config_mtime = st.st_mtim;
        copy_str(config_file, sizeof config_file, path);
    }
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        free(text);
        return NVML_ERROR_UNKNOWN;
    }
    fclose(f);
    text[size] = 0;
    root = j_parse(text, &err);
    free(text);
    if (!root || root->type != J_OBJ) {
        fprintf(stderr, "fake-nvml: %s: %s\n", path, root ? "expected a JSON object" : err);
        j_free(root);
        return NVML_ERROR_UNKNOWN;
    }
    rc = parse_code(j_get(root, "init_error"));
    if (rc != NVML_SUCCESS) { j_free(root); return rc; }
    copy_str(driver_version, sizeof driver_version, j_str(root, "driver_version", "550.90.07"));
    copy_str(nvml_version, sizeof nvml_version, j_str(root, "nvml_version", "12.550.90.07"));
    cuda_version = (int)j_num(root, "cuda_driver_version", 12040);
    list = j_get(root, "gpus");
    n_gpus = n_present = 0;
    for (jnode *g = list && list->type == J_ARR ? list->child : NULL; g && n_gpus < MAX_GPUS; g = g->next) {
        load_gpu(&gpus[n_gpus], g, n_gpus);
        /* A GPU fallen off the bus is not enumerated at all; the others close ranks, as the
           real driver numbers GPUs in PCI order among those it found. */
        if (j_bool(g, "off_bus", 0)) {
            gpus[n_gpus].index = -1;
        } else {
            gpus[n_gpus].index = n_present;
            present[n_present++] = n_gpus;
        }
        n_gpus++;
    }
    /* As in NVML, event sets live until freed or until the last nvmlShutdown: a reload
       (another nvmlInit while initialised) keeps them and their delivery cursors. */
    if (refcount == 0) memset(event_sets, 0, sizeof event_sets);
    j_free(root);
    return NVML_SUCCESS;
}

/* The config file was rewritten since it was loaded (a test injected something). */
static int config_changed(void) {
    struct stat st;
    if (!config_file[0] || stat(config_file, &st) != 0) return 0;
    return st.st_mtim.tv_sec != config_mtime.tv_sec || st.st_mtim.tv_nsec != config_mtime.tv_nsec;
}

/* Re-read only the Xid lists of a rewritten config, so that a waiting event set sees Xids
   that "happen" while NVML stays initialised; the other fields change at the next nvmlInit
   (a query running in another thread never sees a half-reloaded GPU). Called under lock. */
static void reload_xids(void) {
    FILE *f = fopen(config_file, "rb");
    long size;
    char *text;
    const char *err = NULL;
    jnode *root, *list, *g, *v, *e;
    struct stat st;
    int slot = 0;
    if (!f) return;
    if (fstat(fileno(f), &st) == 0) config_mtime = st.st_mtim;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    rewind(f);
    text = malloc((size_t)size + 1);
    if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) { fclose(f); free(text); return; }
    fclose(f);
    text[size] = 0;
    root = j_parse(text, &err);
    free(text);
    if (!root) return;
    list = j_get(root, "gpus");
    for (g = list && list->type == J_ARR ? list->child : NULL; g && slot < n_gpus; g = g->next, slot++) {
        fake_gpu *gp = &gpus[slot];
        int n = 0;
        v = j_get(g, "xid_events");
        for (e = v && v->type == J_ARR ? v->child : NULL; e && n < MAX_XIDS; e = e->next)
            if (e->type == J_NUM) gp->xids[n++] = (int)e->num;
        gp->n_xids = n;
    }
    j_free(root);
}

#endif
