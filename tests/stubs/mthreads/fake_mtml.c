/* Stand-in for Moore Threads' libmtml.so (MTML), for the test suite only.
 *
 * Exports the real MTML symbol names with the signatures of mtml.h (Moore Threads' MTML API
 * reference, as mirrored by the official mthreads-ml-py binding and fastfetch's clean-room header):
 * opaque MtmlLibrary/MtmlSystem/MtmlDevice/MtmlGpu/MtmlMemory objects, MtmlPciInfo with a 32-byte
 * "sbdf" string first, memory in bytes, power in mW. Data from "<this library>.fixture":
 *
 *   init=<MtmlReturn of mtmlLibraryInit>   count_error=<MtmlReturn>   devices=<n>   driver=<x.y.z>
 *   device.<i>.uuid / name / bus (sbdf) / memory_bytes / memory_used_bytes / cores / util
 *   device.<i>.temperature / power_mw   device.<i>.uuid_error / name_error / memory_error
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef int MtmlReturn;
#define MTML_SUCCESS 0
#define MTML_ERROR_DRIVER_FAILURE 2
#define MTML_ERROR_INVALID_ARGUMENT 3
#define MTML_ERROR_NOT_SUPPORTED 4
#define MTML_ERROR_INSUFFICIENT_SIZE 6
#define MTML_ERROR_UNKNOWN 999

typedef struct MtmlLibrary { int live; } MtmlLibrary;
typedef struct MtmlSystem { int live; } MtmlSystem;
typedef struct MtmlDevice { int index; } MtmlDevice;
typedef struct MtmlGpu { int index; } MtmlGpu;
typedef struct MtmlMemory { int index; } MtmlMemory;

typedef struct {
    char sbdf[32];
    unsigned int segment, bus, device, pciDeviceId, pciSubsystemId, busWidth;
    float pciMaxSpeed, pciCurSpeed;
    unsigned int pciMaxWidth, pciCurWidth, pciMaxGen, pciCurGen;
    int rsvd[6];
} MtmlPciInfo;

static MtmlLibrary library = {0};
static MtmlSystem sys_object = {0};
static MtmlDevice devices[64];
static MtmlGpu gpus[64];
static MtmlMemory memories[64];

static int dev_index(const MtmlDevice *dev) {
    if (!library.live || dev < &devices[0] || dev >= &devices[64]) return -1;
    if (dev->index < 0 || dev->index >= kv_int("devices", 0)) return -1;
    return dev->index;
}

static MtmlReturn copy_string(const char *value, char *out, unsigned int length) {
    if (!value) return MTML_ERROR_UNKNOWN;
    if (!out) return MTML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length) return MTML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return MTML_SUCCESS;
}

const char *mtmlErrorString(MtmlReturn code) {
    switch (code) {
    case 0: return "Success";
    case 1: return "Driver not loaded";
    case 2: return "Driver failure";
    case 3: return "Invalid argument";
    case 4: return "Not supported";
    case 6: return "Insufficient size";
    default: return "Unknown error";
    }
}

MtmlReturn mtmlLibraryInit(MtmlLibrary **lib) {
    MtmlReturn rc;
    int i;
    if (!lib) return MTML_ERROR_INVALID_ARGUMENT;
    if (kv_load() != 0) return MTML_ERROR_UNKNOWN;
    rc = (MtmlReturn)kv_int("init", 0);
    if (rc) return rc;
    for (i = 0; i < 64; i++) devices[i].index = gpus[i].index = memories[i].index = i;
    library.live = 1;
    *lib = &library;
    return MTML_SUCCESS;
}

MtmlReturn mtmlLibraryShutDown(MtmlLibrary *lib) {
    if (lib != &library) return MTML_ERROR_INVALID_ARGUMENT;
    library.live = 0;
    return MTML_SUCCESS;
}

MtmlReturn mtmlLibraryCountDevice(const MtmlLibrary *lib, unsigned int *count) {
    MtmlReturn rc;
    if (lib != &library || !library.live || !count) return MTML_ERROR_INVALID_ARGUMENT;
    rc = (MtmlReturn)kv_int("count_error", 0);
    if (rc) return rc;
    *count = (unsigned int)kv_int("devices", 0);
    return MTML_SUCCESS;
}

MtmlReturn mtmlLibraryInitDeviceByIndex(const MtmlLibrary *lib, unsigned int index, MtmlDevice **dev) {
    if (lib != &library || !library.live || !dev) return MTML_ERROR_INVALID_ARGUMENT;
    if (index >= (unsigned int)kv_int("devices", 0) || index >= 64) return MTML_ERROR_INVALID_ARGUMENT;
    *dev = &devices[index];
    return MTML_SUCCESS;
}

MtmlReturn mtmlLibraryInitSystem(const MtmlLibrary *lib, MtmlSystem **sys) {
    if (lib != &library || !library.live || !sys) return MTML_ERROR_INVALID_ARGUMENT;
    sys_object.live = 1;
    *sys = &sys_object;
    return MTML_SUCCESS;
}

MtmlReturn mtmlSystemGetDriverVersion(const MtmlSystem *sys, char *version, unsigned int length) {
    if (sys != &sys_object || !library.live) return MTML_ERROR_INVALID_ARGUMENT;
    return copy_string(kv_get("driver"), version, length);
}

MtmlReturn mtmlDeviceGetUUID(const MtmlDevice *dev, char *uuid, unsigned int length) {
    int i = dev_index(dev);
    MtmlReturn rc;
    if (i < 0) return MTML_ERROR_INVALID_ARGUMENT;
    rc = (MtmlReturn)kv_dev_int(i, "uuid_error", 0);
    if (rc) return rc;
    return copy_string(kv_dev(i, "uuid"), uuid, length);
}

MtmlReturn mtmlDeviceGetName(const MtmlDevice *dev, char *name, unsigned int length) {
    int i = dev_index(dev);
    MtmlReturn rc;
    if (i < 0) return MTML_ERROR_INVALID_ARGUMENT;
    rc = (MtmlReturn)kv_dev_int(i, "name_error", 0);
    if (rc) return rc;
    return copy_string(kv_dev(i, "name"), name, length);
}

MtmlReturn mtmlDeviceGetPciInfo(const MtmlDevice *dev, MtmlPciInfo *pci) {
    unsigned dom, bus, d, fn;
    const char *sbdf;
    int i = dev_index(dev);
    if (i < 0 || !pci) return MTML_ERROR_INVALID_ARGUMENT;
    sbdf = kv_dev(i, "bus");
    if (kv_bdf(sbdf, &dom, &bus, &d, &fn)) return MTML_ERROR_DRIVER_FAILURE;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->sbdf, sizeof pci->sbdf, "%.31s", sbdf);
    pci->segment = dom;
    pci->bus = bus;
    pci->device = d;
    pci->pciDeviceId = 0x03271ed5;
    pci->pciMaxSpeed = pci->pciCurSpeed = 16.0f;
    pci->pciMaxWidth = pci->pciCurWidth = 16;
    pci->pciMaxGen = pci->pciCurGen = 4;
    return MTML_SUCCESS;
}

MtmlReturn mtmlDeviceCountGpuCores(const MtmlDevice *dev, unsigned int *numCores) {
    int i = dev_index(dev);
    if (i < 0 || !numCores) return MTML_ERROR_INVALID_ARGUMENT;
    if (!kv_dev(i, "cores")) return MTML_ERROR_NOT_SUPPORTED;
    *numCores = (unsigned int)kv_dev_int(i, "cores", 0);
    return MTML_SUCCESS;
}

MtmlReturn mtmlDeviceGetPowerUsage(const MtmlDevice *dev, unsigned int *power) {
    int i = dev_index(dev);
    if (i < 0 || !power) return MTML_ERROR_INVALID_ARGUMENT;
    *power = (unsigned int)kv_dev_int(i, "power_mw", 0);
    return MTML_SUCCESS;
}

MtmlReturn mtmlDeviceInitMemory(const MtmlDevice *dev, MtmlMemory **mem) {
    int i = dev_index(dev);
    MtmlReturn rc;
    if (i < 0 || !mem) return MTML_ERROR_INVALID_ARGUMENT;
    rc = (MtmlReturn)kv_dev_int(i, "memory_error", 0);
    if (rc) return rc;
    *mem = &memories[i];
    return MTML_SUCCESS;
}

MtmlReturn mtmlMemoryGetTotal(const MtmlMemory *mem, unsigned long long *total) {
    if (!mem || !total || !library.live) return MTML_ERROR_INVALID_ARGUMENT;
    *total = (unsigned long long)kv_dev_int(mem->index, "memory_bytes", 0);
    return MTML_SUCCESS;
}

MtmlReturn mtmlMemoryGetUsed(const MtmlMemory *mem, unsigned long long *used) {
    if (!mem || !used || !library.live) return MTML_ERROR_INVALID_ARGUMENT;
    *used = (unsigned long long)kv_dev_int(mem->index, "memory_used_bytes", 0);
    return MTML_SUCCESS;
}

MtmlReturn mtmlDeviceInitGpu(const MtmlDevice *dev, MtmlGpu **gpu) {
    int i = dev_index(dev);
    if (i < 0 || !gpu) return MTML_ERROR_INVALID_ARGUMENT;
    *gpu = &gpus[i];
    return MTML_SUCCESS;
}

MtmlReturn mtmlGpuGetUtilization(const MtmlGpu *gpu, unsigned int *utilization) {
    if (!gpu || !utilization || !library.live) return MTML_ERROR_INVALID_ARGUMENT;
    *utilization = (unsigned int)kv_dev_int(gpu->index, "util", 0);
    return MTML_SUCCESS;
}

MtmlReturn mtmlGpuGetTemperature(const MtmlGpu *gpu, unsigned int *temp) {
    if (!gpu || !temp || !library.live) return MTML_ERROR_INVALID_ARGUMENT;
    *temp = (unsigned int)kv_dev_int(gpu->index, "temperature", 0);
    return MTML_SUCCESS;
}
