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
#include "../common/fixture.h" /* the fixture store; first, as it defines _GNU_SOURCE */

#define PFX(name) hgml##name
#define PCI_FN hgmlDeviceGetPciInfo_v2
#define CC_FN hgmlDeviceGetHggcComputeCapability
#define RT_FN hgmlSystemGetHggcDriverVersion
#define RT_KEY "hggc"
#include "../common/nvml_shaped.h"

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
