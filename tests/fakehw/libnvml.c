/*
 * Stand-in libnvidia-ml.so.1 for slurmguard's tests (no GPU on the test machines).
 *
 * Exports the subset of the NVML C API that slurmguard (through the real pynvml) calls, with
 * NVML's symbol names, struct layouts and return codes, so the same Python code runs
 * unchanged here and against the real driver. What each GPU reports comes from a JSON file
 * named by $FAKE_NVML_CONFIG (a file, or a directory holding <$SLURMD_NODENAME>.json with
 * default.json as fallback), re-read at every nvmlInit so a test injects a fault by
 * rewriting the file. The format is documented in docs/testing.md ("Stand-in NVML").
 *
 * Built by tests/fakehw/nvml.py: gcc -shared -fPIC -Wl,-soname,libnvidia-ml.so.1.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "minijson.h"

#define API __attribute__((visibility("default")))

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

API const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == result) return errors[i].text;
    return "Unknown Error";
}

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
    memset(event_sets, 0, sizeof event_sets);
    j_free(root);
    return NVML_SUCCESS;
}

static nvmlReturn_t init(void) {
    nvmlReturn_t rc;
    pthread_mutex_lock(&lock);
    rc = load_config();
    if (rc == NVML_SUCCESS) refcount++;
    pthread_mutex_unlock(&lock);
    return rc;
}

API nvmlReturn_t nvmlInit(void) { return init(); }
API nvmlReturn_t nvmlInit_v2(void) { return init(); }
API nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; return init(); }

API nvmlReturn_t nvmlShutdown(void) {
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (refcount == 0) rc = NVML_ERROR_UNINITIALIZED;
    else refcount--;
    pthread_mutex_unlock(&lock);
    return rc;
}

#define REQUIRE_INIT() do { if (refcount == 0) return NVML_ERROR_UNINITIALIZED; } while (0)

static nvmlReturn_t put_str(char *buf, unsigned int len, const char *s) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned int len) {
    REQUIRE_INIT();
    return put_str(v, len, driver_version);
}

API nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned int len) {
    return put_str(v, len, nvml_version[0] ? nvml_version : "12.550.90.07");
}

API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    REQUIRE_INIT();
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = cuda_version;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

static nvmlReturn_t get_count(unsigned int *count) {
    REQUIRE_INIT();
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned)n_present;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCount(unsigned int *c) { return get_count(c); }
API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *c) { return get_count(c); }

static nvmlReturn_t by_index(unsigned int index, nvmlDevice_t *dev) {
    REQUIRE_INIT();
    if (!dev || index >= (unsigned)n_present) return NVML_ERROR_INVALID_ARGUMENT;
    fake_gpu *g = &gpus[present[index]];
    if (g->lost) return NVML_ERROR_GPU_IS_LOST;
    for (int i = 0; i < g->n_faults; i++) /* "errors": {"handle": ...} */
        if (strcmp(g->fault_field[i], "handle") == 0) return g->fault_code[i];
    *dev = g;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t *d) { return by_index(i, d); }
API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d) { return by_index(i, d); }

API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *dev) {
    unsigned d = 0, b = 0, v = 0, f = 0;
    REQUIRE_INIT();
    if (!bus_id || !dev || sscanf(bus_id, "%x:%x:%x.%x", &d, &b, &v, &f) < 3)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n_present; i++) {
        fake_gpu *g = &gpus[present[i]];
        if (g->domain == d && g->bus == b && g->device == v) {
            if (g->lost) return NVML_ERROR_GPU_IS_LOST;
            *dev = g;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *b, nvmlDevice_t *d) { return nvmlDeviceGetHandleByPciBusId_v2(b, d); }

API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *dev) {
    REQUIRE_INIT();
    if (!uuid || !dev) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n_present; i++) {
        fake_gpu *g = &gpus[present[i]];
        if (strcmp(g->uuid, uuid) == 0) {
            if (g->lost) return NVML_ERROR_GPU_IS_LOST;
            *dev = g;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* The status a query on `field` of device g returns: lost, an injected fault, or success. */
static nvmlReturn_t field(nvmlDevice_t g, const char *name) {
    if (refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (!g || g < gpus || g >= gpus + n_gpus || g->magic != GPU_MAGIC || g->index < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g->lost) return NVML_ERROR_GPU_IS_LOST;
    for (int i = 0; i < g->n_faults; i++)
        if (strcmp(g->fault_field[i], name) == 0) return g->fault_code[i];
    return NVML_SUCCESS;
}

#define FIELD(dev, name) do { nvmlReturn_t rc_ = field(dev, name); if (rc_) return rc_; } while (0)
#define OUT(p) do { if (!(p)) return NVML_ERROR_INVALID_ARGUMENT; } while (0)

API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t dev, unsigned int *index) {
    FIELD(dev, "index"); OUT(index);
    *index = (unsigned)dev->index;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int len) {
    FIELD(dev, "name");
    return put_str(name, len, dev->name);
}

API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t dev, char *uuid, unsigned int len) {
    FIELD(dev, "uuid");
    return put_str(uuid, len, dev->uuid);
}

API nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t dev, char *serial, unsigned int len) {
    FIELD(dev, "serial");
    return put_str(serial, len, dev->serial);
}

static nvmlReturn_t pci_info(nvmlDevice_t dev, nvmlPciInfo_t *pci) {
    FIELD(dev, "pci_info"); OUT(pci);
    memset(pci, 0, sizeof *pci);
    copy_str(pci->busIdLegacy, sizeof pci->busIdLegacy, dev->bus_id_legacy);
    copy_str(pci->busId, sizeof pci->busId, dev->bus_id);
    pci->domain = dev->domain;
    pci->bus = dev->bus;
    pci->device = dev->device;
    pci->pciDeviceId = dev->pci_device_id;
    pci->pciSubSystemId = dev->pci_subsystem_id;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_info(d, p); }
API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_info(d, p); }
API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { return pci_info(d, p); }

API nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t dev, int sensor, unsigned int *temp) {
    FIELD(dev, "temperature"); OUT(temp);
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU only */
    *temp = dev->temp;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t dev, nvmlTemperature_v1_t *t) {
    FIELD(dev, "temperature"); OUT(t);
    if (t->version != 0x100000Cu) return 25; /* NVML_ERROR_ARGUMENT_VERSION_MISMATCH */
    if (t->sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT;
    t->temperature = (int)dev->temp;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t dev, int which, unsigned int *temp) {
    FIELD(dev, "temperature_threshold"); OUT(temp);
    switch (which) {
    case 0: *temp = dev->t_shutdown; break;
    case 1: *temp = dev->t_slowdown; break;
    case 2: *temp = dev->t_mem_max; break;
    case 3: *temp = dev->t_gpu_max; break;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t dev, int *current, int *pending) {
    FIELD(dev, "ecc_mode"); OUT(current); OUT(pending);
    *current = dev->ecc_current;
    *pending = dev->ecc_pending;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t dev, int error_type, int counter_type,
                                             unsigned long long *count) {
    FIELD(dev, "ecc"); OUT(count);
    if (error_type < 0 || error_type > 1 || counter_type < 0 || counter_type > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dev->ecc_current) return NVML_ERROR_NOT_SUPPORTED; /* as the driver does with ECC off */
    *count = dev->ecc[error_type][counter_type];
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t dev, int *pending) {
    FIELD(dev, "retired_pages"); OUT(pending);
    *pending = dev->retired_pending;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t dev, int cause, unsigned int *count,
                                           unsigned long long *addresses) {
    unsigned n;
    FIELD(dev, "retired_pages"); OUT(count);
    if (cause < 0 || cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    n = cause == 0 ? dev->retired_sbe : dev->retired_dbe;
    if (n == 0) { *count = 0; return NVML_SUCCESS; }
    if (!addresses || *count < n) { *count = n; return NVML_ERROR_INSUFFICIENT_SIZE; }
    for (unsigned i = 0; i < n; i++) addresses[i] = 0x100000ull * (i + 1) + (unsigned)cause * 0x1000;
    *count = n;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t dev, unsigned int *corr, unsigned int *unc,
                                           unsigned int *pending, unsigned int *failure) {
    FIELD(dev, "remapped_rows"); OUT(corr); OUT(unc); OUT(pending); OUT(failure);
    *corr = dev->remap_corr;
    *unc = dev->remap_unc;
    *pending = dev->remap_pending;
    *failure = dev->remap_failure;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t dev, unsigned long long *r) {
    FIELD(dev, "clocks_event_reasons"); OUT(r);
    *r = dev->clock_reasons;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r) {
    return nvmlDeviceGetCurrentClocksEventReasons(d, r);
}

API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t dev, unsigned int link, int *active) {
    FIELD(dev, "nvlink"); OUT(active);
    if (link >= (unsigned)dev->n_links) return NVML_ERROR_INVALID_ARGUMENT;
    *active = dev->link_up[link];
    return NVML_SUCCESS;
}

#define PCIE_GETTER(fn, member)                                  \
    API nvmlReturn_t fn(nvmlDevice_t dev, unsigned int *value) { \
        FIELD(dev, "pcie"); OUT(value);                          \
        *value = dev->member;                                    \
        return NVML_SUCCESS;                                     \
    }
PCIE_GETTER(nvmlDeviceGetCurrPcieLinkWidth, pcie_width)
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkWidth, pcie_max_width)
PCIE_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, pcie_gen)
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, pcie_max_gen)
PCIE_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, pcie_max_gen)

API nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t dev, int *mode) {
    FIELD(dev, "persistence_mode"); OUT(mode);
    *mode = dev->persistence;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t dev, unsigned int *mw) {
    FIELD(dev, "power"); OUT(mw);
    *mw = dev->power_mw;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t dev, unsigned int *mw) {
    FIELD(dev, "power"); OUT(mw);
    *mw = dev->power_limit_mw;
    return NVML_SUCCESS;
}

/* ---- events: Xid critical errors listed in the config, each delivered once per set ---- */

API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    REQUIRE_INIT(); OUT(set);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_EVENT_SETS; i++) {
        if (!event_sets[i].used) {
            memset(&event_sets[i], 0, sizeof event_sets[i]);
            event_sets[i].used = 1;
            *set = &event_sets[i];
            pthread_mutex_unlock(&lock);
            return NVML_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return 20; /* NVML_ERROR_MEMORY */
}

static int valid_set(nvmlEventSet_t s) {
    return s && s >= event_sets && s < event_sets + MAX_EVENT_SETS && s->used;
}

API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t dev, unsigned long long *types) {
    FIELD(dev, "events"); OUT(types);
    *types = SUPPORTED_EVENTS;
    return NVML_SUCCESS;
}

API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t dev, unsigned long long types, nvmlEventSet_t set) {
    FIELD(dev, "events");
    if (!valid_set(set)) return NVML_ERROR_INVALID_ARGUMENT;
    if (types & ~SUPPORTED_EVENTS) return NVML_ERROR_NOT_SUPPORTED;
    set->mask[dev - gpus] |= types;
    return NVML_SUCCESS;
}

static nvmlReturn_t wait_event(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms, int v2) {
    REQUIRE_INIT(); OUT(data);
    if (!valid_set(set)) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < n_gpus; i++) {
        fake_gpu *g = &gpus[i];
        if ((set->mask[i] & NVML_EVENT_XID) && set->cursor[i] < g->n_xids) {
            data->device = g;
            data->eventType = NVML_EVENT_XID;
            data->eventData = (unsigned long long)g->xids[set->cursor[i]++];
            if (v2) data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
            return NVML_SUCCESS;
        }
    }
    usleep(timeout_ms * 1000u); /* nothing pending: block for the timeout, as NVML does */
    return NVML_ERROR_TIMEOUT;
}

/* v1's struct stops after eventData; both share the leading fields. */
API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t s, nvmlEventData_t *d, unsigned int t) { return wait_event(s, d, t, 0); }
API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t s, nvmlEventData_t *d, unsigned int t) { return wait_event(s, d, t, 1); }

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!valid_set(set)) return NVML_ERROR_INVALID_ARGUMENT;
    set->used = 0;
    return NVML_SUCCESS;
}
