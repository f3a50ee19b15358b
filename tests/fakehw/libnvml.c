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
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nvml_state.h"

#define API __attribute__((visibility("default")))

API const char *nvmlErrorString(nvmlReturn_t result) {
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == result) return errors[i].text;
    return "Unknown Error";
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

API nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t dev, int type, unsigned int *clock) {
    FIELD(dev, "clocks"); OUT(clock);
    if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = dev->clock[type];
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t dev, int type, unsigned int *clock) {
    FIELD(dev, "clocks"); OUT(clock);
    if (type < 0 || type > 3) return NVML_ERROR_INVALID_ARGUMENT;
    *clock = dev->max_clock[type];
    return NVML_SUCCESS;
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

static int next_event(nvmlEventSet_t set, nvmlEventData_t *data, int v2) {
    for (int i = 0; i < n_gpus; i++) {
        fake_gpu *g = &gpus[i];
        if ((set->mask[i] & NVML_EVENT_XID) && set->cursor[i] < g->n_xids) {
            data->device = g;
            data->eventType = NVML_EVENT_XID;
            data->eventData = (unsigned long long)g->xids[set->cursor[i]++];
            if (v2) data->gpuInstanceId = data->computeInstanceId = 0xFFFFFFFFu;
            return 1;
        }
    }
    return 0;
}

/* An inotify descriptor on the config file's directory (a rewrite is a rename into it), or
   -1 (then the wait polls). Created before the first look, so no rewrite falls between. */
static int watch_config(void) {
    char dir[sizeof config_file];
    char *slash;
    int fd;
    pthread_mutex_lock(&lock);
    copy_str(dir, sizeof dir, config_file);
    pthread_mutex_unlock(&lock);
    slash = strrchr(dir, '/');
    if (!dir[0] || !slash) return -1;
    if (slash == dir) slash[1] = 0; else *slash = 0;
    fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0) return -1;
    if (inotify_add_watch(fd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE | IN_MODIFY) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static unsigned elapsed_ms(const struct timespec *t0) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (unsigned)((now.tv_sec - t0->tv_sec) * 1000 + (now.tv_nsec - t0->tv_nsec) / 1000000);
}

/* Deliver the next pending Xid; else block up to timeout_ms, as NVML does, returning as soon
   as one arrives (a rewrite of the config file appending to "xid_events"). The real driver
   sleeps in the kernel until an event or the timeout: so does this one, on an inotify watch of
   the config's directory (a 2-ms poll here cost an idle agent ~15 CPU-s an hour that a real
   node never pays; tests/bench/bench_agent_idle.py). Without inotify it polls every 2 ms. */
static nvmlReturn_t wait_event(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeout_ms, int v2) {
    struct timespec t0;
    int fd;
    REQUIRE_INIT(); OUT(data);
    if (!valid_set(set)) return NVML_ERROR_INVALID_ARGUMENT;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fd = watch_config();
    for (;;) {
        int got;
        unsigned waited;
        pthread_mutex_lock(&lock);
        if (config_changed()) reload_xids();
        got = valid_set(set) && next_event(set, data, v2);
        pthread_mutex_unlock(&lock);
        waited = elapsed_ms(&t0);
        if (got || waited >= timeout_ms) {
            if (fd >= 0) close(fd);
            return got ? NVML_SUCCESS : NVML_ERROR_TIMEOUT;
        }
        if (fd >= 0) {
            struct pollfd pfd = {fd, POLLIN, 0};
            char buf[4096];
            if (poll(&pfd, 1, (int)(timeout_ms - waited)) > 0)
                while (read(fd, buf, sizeof buf) > 0) {}
        } else {
            usleep(2000);
        }
    }
}

/* v1's struct stops after eventData; both share the leading fields. */
API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t s, nvmlEventData_t *d, unsigned int t) { return wait_event(s, d, t, 0); }
API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t s, nvmlEventData_t *d, unsigned int t) { return wait_event(s, d, t, 1); }

API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (!valid_set(set)) return NVML_ERROR_INVALID_ARGUMENT;
    set->used = 0;
    return NVML_SUCCESS;
}
