/* Stand-in for T-Head's libhgml.so (HGML, the PPU management library), for the test suite only.
 *
 * HGML mirrors NVML under an "hgml" prefix (gpustack/gpustack-operator binding/hgml; the pyhgml
 * ctypes binding): hgmlInit_v2, hgmlDeviceGetCount_v2, hgmlDeviceGetHandleByIndex_v2,
 * hgmlDeviceGetPciInfo_v2, hgmlSystemGetHggcDriverVersion, hgmlDeviceGetHggcComputeCapability,
 * hgmlDeviceGetNumGpuCores, and the MIG calls hgmlDeviceGetMigMode,
 * hgmlDeviceGetGpuInstanceProfileInfoV (struct version 0x02000098, 152 bytes) and
 * hgmlDeviceGetGpuInstancePossiblePlacements_v2. Data from "<this library>.fixture":
 *
 *   init / count_error / devices / driver / hggc=<integer, 1000*major+10*minor>
 *   device.<i>.uuid / name / bus / minor / memory_bytes / memory_used_bytes / cc / cores / util
 *   device.<i>.temperature / power_mw / mig=0|1 / mig_error=<hgmlReturn_t>
 *   profiles=<n>  profile.<n>.id / name / slices / instances / memory_mib / placements=<start>+<size>,...
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PFX(name) hgml##name
#define PCI_FN hgmlDeviceGetPciInfo_v2
#define CC_FN hgmlDeviceGetHggcComputeCapability
#define RT_FN hgmlSystemGetHggcDriverVersion
#define RT_KEY "hggc"
/* ---- fixture store: the same block in every stand-in of this suite ---------------------------
 * The data file is "<this library's own path>.fixture" (found through dladdr), one "key=value" per
 * line, '#' comments. Per-device keys are "device.<index>.<field>". Re-read on every init call, so a
 * change another process wrote is seen; kv_save() rewrites it (that is how a mode set persists). */
#define KV_MAX 1024
static char kv_keys[KV_MAX][96];
static char kv_vals[KV_MAX][256];
static int kv_n = 0;
static char kv_path[4096];

static void kv_locate(void) {
    Dl_info info;
    if (kv_path[0] == '\0' && dladdr((void *)kv_locate, &info) && info.dli_fname) {
        snprintf(kv_path, sizeof kv_path, "%.4000s.fixture", info.dli_fname);
    }
}

static __attribute__((unused)) int kv_load(void) {
    char line[512];
    FILE *fh;
    kv_locate();
    kv_n = 0;
    fh = fopen(kv_path, "r");
    if (!fh) return -1;
    while (fgets(line, sizeof line, fh) && kv_n < KV_MAX) {
        char *eq, *end;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        end = eq + 1;
        snprintf(kv_keys[kv_n], sizeof kv_keys[kv_n], "%.95s", line);
        snprintf(kv_vals[kv_n], sizeof kv_vals[kv_n], "%.255s", end);
        kv_n++;
    }
    fclose(fh);
    return 0;
}

static __attribute__((unused)) const char *kv_get(const char *key) {
    int i;
    for (i = 0; i < kv_n; i++) {
        if (strcmp(kv_keys[i], key) == 0) return kv_vals[i];
    }
    return NULL;
}

static __attribute__((unused)) long kv_int(const char *key, long dflt) {
    const char *v = kv_get(key);
    return v ? strtol(v, NULL, 0) : dflt;
}

static __attribute__((unused)) const char *kv_dev(int dev, const char *field) {
    char key[96];
    snprintf(key, sizeof key, "device.%d.%.60s", dev, field);
    return kv_get(key);
}

static __attribute__((unused)) long kv_dev_int(int dev, const char *field, long dflt) {
    const char *v = kv_dev(dev, field);
    return v ? strtol(v, NULL, 0) : dflt;
}

static __attribute__((unused)) int kv_save(void) {
    FILE *fh;
    int i;
    kv_locate();
    fh = fopen(kv_path, "w");
    if (!fh) return -1;
    fputs("# rewritten by the stand-in library after a state change\n", fh);
    for (i = 0; i < kv_n; i++) fprintf(fh, "%s=%s\n", kv_keys[i], kv_vals[i]);
    fclose(fh);
    return 0;
}

static __attribute__((unused)) int kv_set_dev(int dev, const char *field, const char *value) {
    char key[96];
    int i;
    snprintf(key, sizeof key, "device.%d.%.60s", dev, field);
    for (i = 0; i < kv_n; i++) {
        if (strcmp(kv_keys[i], key) == 0) {
            snprintf(kv_vals[i], sizeof kv_vals[i], "%.255s", value);
            return kv_save();
        }
    }
    if (kv_n >= KV_MAX) return -1;
    snprintf(kv_keys[kv_n], sizeof kv_keys[kv_n], "%.95s", key);
    snprintf(kv_vals[kv_n], sizeof kv_vals[kv_n], "%.255s", value);
    kv_n++;
    return kv_save();
}

/* "0000:1a:00.0" -> domain/bus/device/function; 0 on success */
static __attribute__((unused)) int kv_bdf(const char *bdf, unsigned *dom, unsigned *bus, unsigned *dev,
                                          unsigned *fn) {
    if (!bdf) return -1;
    return sscanf(bdf, "%x:%x:%x.%x", dom, bus, dev, fn) == 4 ? 0 : -1;
}
/* ---- end of fixture store --------------------------------------------------------------------- */

typedef int XRet;
#define X_SUCCESS 0
#define X_ERROR_UNINITIALIZED 1
#define X_ERROR_INVALID_ARGUMENT 2
#define X_ERROR_NOT_SUPPORTED 3
#define X_ERROR_NOT_FOUND 6
#define X_ERROR_INSUFFICIENT_SIZE 7
#define X_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define X_ERROR_UNKNOWN 999

struct dev_st { int index; };
typedef struct dev_st *XDevice;
static struct dev_st devs[64];
static int initialized = 0;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} XPciInfo;
typedef struct { unsigned long long total, free, used; } XMemory;
typedef struct { unsigned int gpu, memory; } XUtilization;

static int dev_index(XDevice device) {
    if (!initialized) return -1;
    if (device < &devs[0] || device >= &devs[64]) return -1;
    if (device->index < 0 || device->index >= kv_int("devices", 0)) return -1;
    return device->index;
}

static XRet copy_string(const char *value, char *out, unsigned int length) {
    if (!value) return X_ERROR_UNKNOWN;
    if (!out) return X_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return X_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return X_SUCCESS;
}

XRet PFX(Init_v2)(void) {
    XRet rc;
    int i;
    if (kv_load() != 0) return X_ERROR_UNKNOWN;
    rc = (XRet)kv_int("init", 0);
    initialized = rc == X_SUCCESS;
    for (i = 0; i < 64; i++) devs[i].index = i;
    return rc;
}

XRet PFX(Shutdown)(void) {
    initialized = 0;
    return X_SUCCESS;
}

const char *PFX(ErrorString)(XRet code) {
    switch (code) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}

XRet PFX(SystemGetDriverVersion)(char *version, unsigned int length) {
    if (!initialized) return X_ERROR_UNINITIALIZED;
    return copy_string(kv_get("driver"), version, length);
}

XRet PFX(DeviceGetCount_v2)(unsigned int *count) {
    XRet rc;
    if (!initialized) return X_ERROR_UNINITIALIZED;
    if (!count) return X_ERROR_INVALID_ARGUMENT;
    rc = (XRet)kv_int("count_error", 0);
    if (rc) return rc;
    *count = (unsigned int)kv_int("devices", 0);
    return X_SUCCESS;
}

XRet PFX(DeviceGetHandleByIndex_v2)(unsigned int index, XDevice *device) {
    if (!initialized) return X_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned int)kv_int("devices", 0) || index >= 64) return X_ERROR_INVALID_ARGUMENT;
    *device = &devs[index];
    return X_SUCCESS;
}

XRet PFX(DeviceGetUUID)(XDevice device, char *uuid, unsigned int length) {
    int i = dev_index(device);
    XRet rc;
    if (i < 0) return X_ERROR_INVALID_ARGUMENT;
    rc = (XRet)kv_dev_int(i, "uuid_error", 0);
    if (rc) return rc;
    return copy_string(kv_dev(i, "uuid"), uuid, length);
}

XRet PFX(DeviceGetName)(XDevice device, char *name, unsigned int length) {
    int i = dev_index(device);
    XRet rc;
    if (i < 0) return X_ERROR_INVALID_ARGUMENT;
    rc = (XRet)kv_dev_int(i, "name_error", 0);
    if (rc) return rc;
    return copy_string(kv_dev(i, "name"), name, length);
}

XRet PCI_FN(XDevice device, XPciInfo *pci) {
    unsigned dom, bus, dev, fn;
    int i = dev_index(device);
    if (i < 0 || !pci) return X_ERROR_INVALID_ARGUMENT;
    if (kv_bdf(kv_dev(i, "bus"), &dom, &bus, &dev, &fn)) return X_ERROR_UNKNOWN;
    memset(pci, 0, sizeof *pci);
    pci->domain = dom;
    pci->bus = bus;
    pci->device = dev;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.%x", dom & 0xffff, bus & 0xff, dev & 0xff,
             fn & 0x7);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%x", dom, bus & 0xff, dev & 0xff, fn & 0x7);
    return X_SUCCESS;
}

XRet PFX(DeviceGetMemoryInfo)(XDevice device, XMemory *memory) {
    int i = dev_index(device);
    XRet rc;
    if (i < 0 || !memory) return X_ERROR_INVALID_ARGUMENT;
    rc = (XRet)kv_dev_int(i, "memory_error", 0);
    if (rc) return rc;
    memory->total = (unsigned long long)kv_dev_int(i, "memory_bytes", 0);
    memory->used = (unsigned long long)kv_dev_int(i, "memory_used_bytes", 0);
    memory->free = memory->total - memory->used;
    return X_SUCCESS;
}

XRet PFX(DeviceGetMinorNumber)(XDevice device, unsigned int *minor) {
    int i = dev_index(device);
    if (i < 0 || !minor) return X_ERROR_INVALID_ARGUMENT;
    if (!kv_dev(i, "minor")) return X_ERROR_NOT_SUPPORTED;
    *minor = (unsigned int)kv_dev_int(i, "minor", 0);
    return X_SUCCESS;
}

XRet CC_FN(XDevice device, int *major, int *minor) {
    int i = dev_index(device);
    if (i < 0 || !major || !minor) return X_ERROR_INVALID_ARGUMENT;
    if (!kv_dev(i, "cc") || sscanf(kv_dev(i, "cc"), "%d.%d", major, minor) != 2) return X_ERROR_NOT_SUPPORTED;
    return X_SUCCESS;
}

XRet PFX(DeviceGetUtilizationRates)(XDevice device, XUtilization *util) {
    int i = dev_index(device);
    if (i < 0 || !util) return X_ERROR_INVALID_ARGUMENT;
    util->gpu = (unsigned int)kv_dev_int(i, "util", 0);
    util->memory = 0;
    return X_SUCCESS;
}

/* sensor 0 = *_TEMPERATURE_GPU */
XRet PFX(DeviceGetTemperature)(XDevice device, int sensor, unsigned int *temp) {
    int i = dev_index(device);
    if (i < 0 || !temp || sensor != 0) return X_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)kv_dev_int(i, "temperature", 0);
    return X_SUCCESS;
}

XRet PFX(DeviceGetPowerUsage)(XDevice device, unsigned int *power) {
    int i = dev_index(device);
    if (i < 0 || !power) return X_ERROR_INVALID_ARGUMENT;
    *power = (unsigned int)kv_dev_int(i, "power_mw", 0);
    return X_SUCCESS;
}

/* cudaDriverVersion-style integer: 1000 * major + 10 * minor */
XRet RT_FN(int *version) {
    if (!initialized) return X_ERROR_UNINITIALIZED;
    if (!version) return X_ERROR_INVALID_ARGUMENT;
    if (!kv_get(RT_KEY)) return X_ERROR_NOT_SUPPORTED;
    *version = (int)kv_int(RT_KEY, 0);
    return X_SUCCESS;
}

XRet hgmlDeviceGetNumGpuCores(XDevice device, unsigned int *cores) {
    int i = dev_index(device);
    if (i < 0 || !cores) return X_ERROR_INVALID_ARGUMENT;
    if (!kv_dev(i, "cores")) return X_ERROR_NOT_SUPPORTED;
    *cores = (unsigned int)kv_dev_int(i, "cores", 0);
    return X_SUCCESS;
}

XRet hgmlDeviceGetMigMode(XDevice device, unsigned int *current, unsigned int *pending) {
    int i = dev_index(device);
    XRet rc;
    if (i < 0 || !current || !pending) return X_ERROR_INVALID_ARGUMENT;
    rc = (XRet)kv_dev_int(i, "mig_error", 0);
    if (rc) return rc;
    *current = *pending = (unsigned int)kv_dev_int(i, "mig", 0);
    return X_SUCCESS;
}

typedef struct {
    unsigned int version, id, isP2pSupported, sliceCount, instanceCount, multiprocessorCount, copyEngineCount,
        decoderCount, encoderCount, jpegCount, ofaCount;
    unsigned long long memorySizeMB;
    char name[96];
} XGpuInstanceProfileInfo_v2;
typedef struct { unsigned int start, size; } XGpuInstancePlacement;

static int profile_slot(unsigned int profile) {
    char key[64];
    int n;
    for (n = 0; n < kv_int("profiles", 0); n++) {
        snprintf(key, sizeof key, "profile.%d.id", n);
        if (kv_int(key, -1) == (long)profile) return n;
    }
    return -1;
}

static long profile_int(int n, const char *field) {
    char key[64];
    snprintf(key, sizeof key, "profile.%d.%.30s", n, field);
    return kv_int(key, 0);
}

XRet hgmlDeviceGetGpuInstanceProfileInfoV(XDevice device, unsigned int profile, XGpuInstanceProfileInfo_v2 *info) {
    char key[64];
    const char *name;
    int i = dev_index(device), n;
    if (i < 0 || !info) return X_ERROR_INVALID_ARGUMENT;
    if (info->version != (unsigned int)(sizeof *info | (2u << 24))) return X_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (!kv_dev_int(i, "mig", 0)) return X_ERROR_NOT_SUPPORTED;
    n = profile_slot(profile);
    if (n < 0) return X_ERROR_NOT_SUPPORTED;
    memset(&info->id, 0, sizeof *info - sizeof info->version);
    info->id = profile;
    info->sliceCount = (unsigned int)profile_int(n, "slices");
    info->instanceCount = (unsigned int)profile_int(n, "instances");
    info->multiprocessorCount = 16 * info->sliceCount;
    info->memorySizeMB = (unsigned long long)profile_int(n, "memory_mib");
    snprintf(key, sizeof key, "profile.%d.name", n);
    name = kv_get(key);
    if (name) snprintf(info->name, sizeof info->name, "%.95s", name);
    return X_SUCCESS;
}

XRet hgmlDeviceGetGpuInstancePossiblePlacements_v2(XDevice device, unsigned int profile,
                                                    XGpuInstancePlacement *placements, unsigned int *count) {
    XGpuInstancePlacement found[32];
    unsigned int k = 0;
    char key[64], buf[256], *tok, *save = NULL;
    const char *v;
    int i = dev_index(device), n;
    if (i < 0 || !count) return X_ERROR_INVALID_ARGUMENT;
    if (!kv_dev_int(i, "mig", 0)) return X_ERROR_NOT_SUPPORTED;
    n = profile_slot(profile);
    if (n < 0) return X_ERROR_NOT_SUPPORTED;
    snprintf(key, sizeof key, "profile.%d.placements", n);
    v = kv_get(key);
    if (v) {
        snprintf(buf, sizeof buf, "%.255s", v);
        for (tok = strtok_r(buf, ",", &save); tok && k < 32; tok = strtok_r(NULL, ",", &save)) {
            if (sscanf(tok, "%u+%u", &found[k].start, &found[k].size) == 2) k++;
        }
    }
    if (!placements) {
        *count = k;
        return X_SUCCESS;
    }
    if (*count < k) {
        *count = k;
        return X_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(placements, found, k * sizeof found[0]);
    *count = k;
    return X_SUCCESS;
}
