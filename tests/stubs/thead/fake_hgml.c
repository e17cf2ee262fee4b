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

/* -- partition calls (NVML's MIG API under the hgml prefix; names assumed, see thead/hgml.py) ------
 *
 * State lives in the fixture file so another process (and a second dlopen) sees it:
 *   device.<i>.gi.<id>=<profile>:<start>:<size>     a live GPU instance ("" once destroyed)
 *   device.<i>.gi.<id>.ci.<cid>=<ci profile>        a live compute instance ("" once destroyed)
 *   device.<i>.gi_create_error / ci_create_error=<hgmlReturn_t>   failure injection
 * GPU instance ids start at 1, compute instance ids at 0 (lowest free); a placement overlapping a
 * live instance, or not among the profile's placements, is refused. */
#define X_ERROR_INSUFFICIENT_RESOURCES 8
#define X_ERROR_IN_USE 19

struct gi_st { int dev, id; };
struct ci_st { int dev, gi, id; };
static struct gi_st gis[64];
static struct ci_st cis[64];
static int n_gis = 0, n_cis = 0;
static const unsigned int ci_slices[8] = {1, 2, 3, 4, 7, 8, 6, 5};

typedef struct { XDevice device; unsigned int id, profileId; XGpuInstancePlacement placement; } XGpuInstanceInfo;
typedef struct {
    XDevice device;
    struct gi_st *gpuInstance;
    unsigned int id, profileId;
    XGpuInstancePlacement placement;
} XComputeInstanceInfo;
typedef struct {
    unsigned int id, sliceCount, instanceCount, multiprocessorCount, sharedCopyEngineCount, sharedDecoderCount,
        sharedEncoderCount, sharedJpegCount, sharedOfaCount;
} XComputeInstanceProfileInfo;

static const char *gi_state(int dev, unsigned int id) {
    char field[48];
    snprintf(field, sizeof field, "gi.%u", id);
    return kv_dev(dev, field);
}

static int gi_live(int dev, unsigned int id) {
    const char *v = gi_state(dev, id);
    return v && v[0];
}

static struct gi_st *gi_handle(int dev, int id) {
    int k;
    for (k = 0; k < n_gis; k++) {
        if (gis[k].dev == dev && gis[k].id == id) return &gis[k];
    }
    if (n_gis >= 64) return NULL;
    gis[n_gis].dev = dev;
    gis[n_gis].id = id;
    return &gis[n_gis++];
}

static struct ci_st *ci_handle(int dev, int gi, int id) {
    int k;
    for (k = 0; k < n_cis; k++) {
        if (cis[k].dev == dev && cis[k].gi == gi && cis[k].id == id) return &cis[k];
    }
    if (n_cis >= 64) return NULL;
    cis[n_cis].dev = dev;
    cis[n_cis].gi = gi;
    cis[n_cis].id = id;
    return &cis[n_cis++];
}

static int gi_valid(struct gi_st *gi) {
    return initialized && gi >= &gis[0] && gi < &gis[64] && gi_live(gi->dev, (unsigned int)gi->id);
}

static const char *ci_state(int dev, int gi, int id) {
    char field[64];
    snprintf(field, sizeof field, "gi.%d.ci.%d", gi, id);
    return kv_dev(dev, field);
}

static int ci_valid(struct ci_st *ci) {
    const char *v;
    if (!initialized || ci < &cis[0] || ci >= &cis[64]) return 0;
    v = ci_state(ci->dev, ci->gi, ci->id);
    return v && v[0] && gi_live(ci->dev, (unsigned int)ci->gi);
}

XRet hgmlDeviceCreateGpuInstanceWithPlacement(XDevice device, unsigned int profile,
                                              const XGpuInstancePlacement *placement, struct gi_st **out) {
    XGpuInstancePlacement possible[32];
    unsigned int count = 32, k, id;
    char field[48], value[64];
    int i = dev_index(device), ok = 0;
    XRet rc;
    if (i < 0 || !placement || !out) return X_ERROR_INVALID_ARGUMENT;
    rc = (XRet)kv_dev_int(i, "gi_create_error", 0);
    if (rc) return rc;
    rc = hgmlDeviceGetGpuInstancePossiblePlacements_v2(device, profile, possible, &count);
    if (rc) return rc;
    for (k = 0; k < count; k++) {
        if (possible[k].start == placement->start && possible[k].size == placement->size) ok = 1;
    }
    if (!ok) return X_ERROR_INVALID_ARGUMENT;
    for (id = 1; id < 32; id++) {
        unsigned int p, s, n;
        const char *v = gi_state(i, id);
        if (!v || !v[0] || sscanf(v, "%u:%u:%u", &p, &s, &n) != 3) continue;
        if (placement->start < s + n && s < placement->start + placement->size) return X_ERROR_INSUFFICIENT_RESOURCES;
    }
    for (id = 1; id < 32 && gi_live(i, id); id++) {
    }
    snprintf(field, sizeof field, "gi.%u", id);
    snprintf(value, sizeof value, "%u:%u:%u", profile, placement->start, placement->size);
    if (kv_set_dev(i, field, value) != 0) return X_ERROR_UNKNOWN;
    *out = gi_handle(i, (int)id);
    return *out ? X_SUCCESS : X_ERROR_UNKNOWN;
}

XRet hgmlGpuInstanceGetInfo(struct gi_st *gi, XGpuInstanceInfo *info) {
    unsigned int p, s, n;
    if (!gi_valid(gi) || !info) return X_ERROR_INVALID_ARGUMENT;
    if (sscanf(gi_state(gi->dev, (unsigned int)gi->id), "%u:%u:%u", &p, &s, &n) != 3) return X_ERROR_UNKNOWN;
    info->device = &devs[gi->dev];
    info->id = (unsigned int)gi->id;
    info->profileId = p;
    info->placement.start = s;
    info->placement.size = n;
    return X_SUCCESS;
}

XRet hgmlGpuInstanceGetComputeInstanceProfileInfo(struct gi_st *gi, unsigned int profile, unsigned int eng,
                                                  XComputeInstanceProfileInfo *info) {
    unsigned int p, s, n;
    if (!gi_valid(gi) || !info || eng != 0) return X_ERROR_INVALID_ARGUMENT;
    if (profile >= 8) return X_ERROR_INVALID_ARGUMENT;
    if (sscanf(gi_state(gi->dev, (unsigned int)gi->id), "%u:%u:%u", &p, &s, &n) != 3) return X_ERROR_UNKNOWN;
    if (ci_slices[profile] > n) return X_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = ci_slices[profile];
    info->instanceCount = n / ci_slices[profile];
    return X_SUCCESS;
}

XRet hgmlGpuInstanceCreateComputeInstance(struct gi_st *gi, unsigned int profile, struct ci_st **out) {
    char field[64], value[16];
    int id;
    XRet rc;
    if (!gi_valid(gi) || !out || profile >= 8) return X_ERROR_INVALID_ARGUMENT;
    rc = (XRet)kv_dev_int(gi->dev, "ci_create_error", 0);
    if (rc) return rc;
    for (id = 0; id < 8; id++) {
        const char *v = ci_state(gi->dev, gi->id, id);
        if (!v || !v[0]) break;
    }
    if (id == 8) return X_ERROR_INSUFFICIENT_RESOURCES;
    snprintf(field, sizeof field, "gi.%d.ci.%d", gi->id, id);
    snprintf(value, sizeof value, "%u", profile);
    if (kv_set_dev(gi->dev, field, value) != 0) return X_ERROR_UNKNOWN;
    *out = ci_handle(gi->dev, gi->id, id);
    return *out ? X_SUCCESS : X_ERROR_UNKNOWN;
}

XRet hgmlComputeInstanceGetInfo(struct ci_st *ci, XComputeInstanceInfo *info) {
    if (!ci_valid(ci) || !info) return X_ERROR_INVALID_ARGUMENT;
    memset(info, 0, sizeof *info);
    info->device = &devs[ci->dev];
    info->gpuInstance = gi_handle(ci->dev, ci->gi);
    info->id = (unsigned int)ci->id;
    info->profileId = (unsigned int)strtoul(ci_state(ci->dev, ci->gi, ci->id), NULL, 10);
    return X_SUCCESS;
}

XRet hgmlDeviceGetGpuInstanceById(XDevice device, unsigned int id, struct gi_st **out) {
    int i = dev_index(device);
    if (i < 0 || !out) return X_ERROR_INVALID_ARGUMENT;
    if (!gi_live(i, id)) return X_ERROR_NOT_FOUND;
    *out = gi_handle(i, (int)id);
    return *out ? X_SUCCESS : X_ERROR_UNKNOWN;
}

XRet hgmlGpuInstanceGetComputeInstanceById(struct gi_st *gi, unsigned int id, struct ci_st **out) {
    const char *v;
    if (!gi_valid(gi) || !out) return X_ERROR_INVALID_ARGUMENT;
    v = ci_state(gi->dev, gi->id, (int)id);
    if (!v || !v[0]) return X_ERROR_NOT_FOUND;
    *out = ci_handle(gi->dev, gi->id, (int)id);
    return *out ? X_SUCCESS : X_ERROR_UNKNOWN;
}

XRet hgmlComputeInstanceDestroy(struct ci_st *ci) {
    char field[64];
    if (!ci_valid(ci)) return X_ERROR_INVALID_ARGUMENT;
    snprintf(field, sizeof field, "gi.%d.ci.%d", ci->gi, ci->id);
    return kv_set_dev(ci->dev, field, "") == 0 ? X_SUCCESS : X_ERROR_UNKNOWN;
}

XRet hgmlGpuInstanceDestroy(struct gi_st *gi) {
    char field[48];
    int id;
    if (!gi_valid(gi)) return X_ERROR_INVALID_ARGUMENT;
    for (id = 0; id < 8; id++) {
        const char *v = ci_state(gi->dev, gi->id, id);
        if (v && v[0]) return X_ERROR_IN_USE;
    }
    snprintf(field, sizeof field, "gi.%d", gi->id);
    return kv_set_dev(gi->dev, field, "") == 0 ? X_SUCCESS : X_ERROR_UNKNOWN;
}
