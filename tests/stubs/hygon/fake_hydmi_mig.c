/* Stand-in for Hygon's libhydmi_mig.so (the DCU Multi-Instance library), for the test suite only.
 *
 * The vendor exports NVML's symbol names with its own struct layouts (dmi_mig.h v1.3.1, as vendored by
 * gpustack/gpustack-operator binding/dmi): no init call; nvmlGetSystemMigMode (the node's mode),
 * nvmlDeviceGetHandleByPciBusId (domain-qualified address; NOT_FOUND for an address no DCU answers
 * for), nvmlDeviceGetGpuInstanceProfileInfo (the argument is a slice-count index, 0 = one slice; the
 * profile id comes back in the answer) and nvmlDeviceGetGpuInstancePossiblePlacements (count in: room,
 * out: written). Data from "<this library>.fixture", re-read on every call:
 *
 *   mig=0|1  mig_pending=0|1  mode_error=<nvmlReturn_t>
 *   devices=<n>  device.<i>.bus=0000:01:00.0  device.<i>.handle_error=<nvmlReturn_t>
 *   profiles=<n>  profile.<n>.index=<slice-count index>  .id  .name  .instances  .cu  .slices
 *                 .memory_mib  .placements=<start>+<size>,...  .error=<ret>  .placements_error=<ret>
 *   (an index no profile lists answers profile_absent=<ret>, INVALID_ARGUMENT by default, as measured)
 */
#include "../common/fixture.h" /* the fixture store; first, as it defines _GNU_SOURCE */

#include <strings.h>

typedef int nvmlReturn_t;
enum { OK = 0, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, NOT_FOUND = 6, INSUFFICIENT_SIZE = 7 };

typedef struct {
    unsigned int id, gi_count_max, cu_count, gpu_slice_count;
    unsigned long long memory_size_MB;
    char name[256];
} GpuInstanceProfileInfo;
typedef struct { unsigned int start, size; } GpuInstancePlacement;

/* a handle is 1 + the device's index, never NULL */
static int handle_index(void *device) {
    long i = (long)(size_t)device - 1;
    return (i >= 0 && i < kv_int("devices", 0)) ? (int)i : -1;
}

nvmlReturn_t nvmlGetSystemMigMode(unsigned int *current, unsigned int *pending) {
    kv_load();
    if (!current || !pending) return INVALID_ARGUMENT;
    if (kv_int("mode_error", 0)) return (nvmlReturn_t)kv_int("mode_error", 0);
    *current = (unsigned int)kv_int("mig", 0);
    *pending = (unsigned int)kv_int("mig_pending", kv_int("mig", 0));
    return OK;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus_id, void **device) {
    int i;
    kv_load();
    if (!bus_id || !device) return INVALID_ARGUMENT;
    if (strlen(bus_id) < 12) return INVALID_ARGUMENT; /* "09:00.0": the library wants the domain */
    for (i = 0; i < kv_int("devices", 0); i++) {
        const char *bus = kv_dev(i, "bus");
        if (bus && strcasecmp(bus, bus_id) == 0) {
            if (kv_dev_int(i, "handle_error", 0)) return (nvmlReturn_t)kv_dev_int(i, "handle_error", 0);
            *device = (void *)(size_t)(i + 1);
            return OK;
        }
    }
    return NOT_FOUND;
}

static long profile_int(int n, const char *field, long dflt) {
    char key[64];
    snprintf(key, sizeof key, "profile.%d.%.30s", n, field);
    return kv_int(key, dflt);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(void *device, unsigned int profile, GpuInstanceProfileInfo *info) {
    char key[64];
    const char *name;
    int n;
    kv_load();
    if (handle_index(device) < 0 || !info) return INVALID_ARGUMENT;
    if (!kv_int("mig", 0)) return NOT_SUPPORTED;
    for (n = 0; n < kv_int("profiles", 0); n++) {
        if (profile_int(n, "index", -1) != (long)profile) continue;
        if (profile_int(n, "error", 0)) return (nvmlReturn_t)profile_int(n, "error", 0);
        memset(info, 0, sizeof *info);
        info->id = (unsigned int)profile_int(n, "id", 0);
        info->gi_count_max = (unsigned int)profile_int(n, "instances", 0);
        info->cu_count = (unsigned int)profile_int(n, "cu", 0);
        info->gpu_slice_count = (unsigned int)profile_int(n, "slices", 0);
        info->memory_size_MB = (unsigned long long)profile_int(n, "memory_mib", 0);
        snprintf(key, sizeof key, "profile.%d.name", n);
        name = kv_get(key);
        if (name) snprintf(info->name, sizeof info->name, "%.255s", name);
        return OK;
    }
    return (nvmlReturn_t)kv_int("profile_absent", INVALID_ARGUMENT);
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(void *device, unsigned int profile_id,
                                                        GpuInstancePlacement *placements, unsigned int *count) {
    GpuInstancePlacement found[32];
    unsigned int k = 0;
    char key[64], buf[256], *tok, *save = NULL;
    const char *v;
    int n;
    kv_load();
    if (handle_index(device) < 0 || !placements || !count) return INVALID_ARGUMENT;
    for (n = 0; n < kv_int("profiles", 0); n++) {
        if (profile_int(n, "id", -1) != (long)profile_id) continue;
        if (profile_int(n, "placements_error", 0)) return (nvmlReturn_t)profile_int(n, "placements_error", 0);
        snprintf(key, sizeof key, "profile.%d.placements", n);
        v = kv_get(key);
        if (v) {
            snprintf(buf, sizeof buf, "%.255s", v);
            for (tok = strtok_r(buf, ",", &save); tok && k < 32; tok = strtok_r(NULL, ",", &save)) {
                if (sscanf(tok, "%u+%u", &found[k].start, &found[k].size) == 2) k++;
            }
        }
        if (*count < k) {
            *count = k;
            return INSUFFICIENT_SIZE;
        }
        memcpy(placements, found, k * sizeof found[0]);
        *count = k;
        return OK;
    }
    return NOT_FOUND;
}

/* -- instance lifecycle (added for the partition responder) -------------------------------------
 *
 * The real entry points are NVML's names (the library exports NVML's symbol names, dmi_mig.h v1.3.1);
 * the argument shapes below are NVML's and are ASSUMED for Hygon where the public sources do not show
 * them (the GI/CI info structs, the CI profile argument):
 *
 *   nvmlDeviceCreateGpuInstanceWithPlacement(device, profileId, const placement *, gpuInstance *)
 *   nvmlGpuInstanceGetInfo(gpuInstance, {device, id, profileId, {start, size}} *)
 *   nvmlGpuInstanceCreateComputeInstance(gpuInstance, ciProfile, computeInstance *)
 *   nvmlComputeInstanceGetInfo(computeInstance, {device, gpuInstance, id, profileId, {start, size}} *)
 *   nvmlDeviceGetGpuInstanceById(device, id, gpuInstance *)
 *   nvmlGpuInstanceGetComputeInstanceById(gpuInstance, id, computeInstance *)
 *   nvmlComputeInstanceDestroy(computeInstance), nvmlGpuInstanceDestroy(gpuInstance)
 *
 * State lives in the fixture file (kv_save), so another process -- or a later load -- sees it:
 *   gi.<dev>.<id>=<profile id>:<start>:<size>     ci.<dev>.<gi>.<id>=<ci profile>
 * GI ids are driver-assigned from gi_id_base (3 by default, as measured: ids bear no relation to the
 * placement). With registry=<directory> (the node's /etc/dmi_mig_config on disk) a compute instance's
 * registry file ci/dev<N>gi<G>ci<C>.conf is written on create (ending "mig_uuid: <uuid>", as the
 * driver's) and removed on destroy. Failures on demand: create_error, ci_create_error, destroy_error,
 * registry_skip=1 (the driver wrote no registry file).
 */
#include <unistd.h>

typedef struct {
    void *device;
    unsigned int id, profileId;
    GpuInstancePlacement placement;
} GpuInstanceInfo;
typedef struct {
    void *device, *gpuInstance;
    unsigned int id, profileId;
    GpuInstancePlacement placement;
} ComputeInstanceInfo;

enum { INSUFFICIENT_RESOURCES = 23, IN_USE = 19 };

static int kv_set(const char *key, const char *value) {
    int i;
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

static int kv_del(const char *key) {
    int i;
    for (i = 0; i < kv_n; i++) {
        if (strcmp(kv_keys[i], key) == 0) {
            memmove(kv_keys[i], kv_keys[i + 1], (size_t)(kv_n - i - 1) * sizeof kv_keys[0]);
            memmove(kv_vals[i], kv_vals[i + 1], (size_t)(kv_n - i - 1) * sizeof kv_vals[0]);
            kv_n--;
            return kv_save();
        }
    }
    return -1;
}

/* handles: a GI is 0x10000 + dev*256 + id, a CI 0x1000000 + dev*65536 + gi*256 + id (never NULL) */
static void *gi_handle(int dev, unsigned gi) { return (void *)(size_t)(0x10000 + dev * 256 + gi); }
static int gi_of(void *h, int *dev, unsigned *gi) {
    long v = (long)(size_t)h - 0x10000;
    if (v < 0 || v >= 256L * kv_int("devices", 0)) return -1;
    *dev = (int)(v / 256);
    *gi = (unsigned)(v % 256);
    return 0;
}
static void *ci_handle(int dev, unsigned gi, unsigned ci) {
    return (void *)(size_t)(0x1000000 + dev * 65536 + gi * 256 + ci);
}
static int ci_of(void *h, int *dev, unsigned *gi, unsigned *ci) {
    long v = (long)(size_t)h - 0x1000000;
    if (v < 0 || v >= 65536L * kv_int("devices", 0)) return -1;
    *dev = (int)(v / 65536);
    *gi = (unsigned)((v / 256) % 256);
    *ci = (unsigned)(v % 256);
    return 0;
}

static const char *gi_get(int dev, unsigned gi) {
    char key[64];
    snprintf(key, sizeof key, "gi.%d.%u", dev, gi);
    return kv_get(key);
}

static void registry_file(int dev, unsigned gi, unsigned ci, char *out, size_t n) {
    snprintf(out, n, "%.3000s/ci/dev%dgi%uci%u.conf", kv_get("registry") ? kv_get("registry") : "", dev, gi, ci);
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(void *device, unsigned int profile_id,
                                                      const GpuInstancePlacement *placement, void **gpu_instance) {
    char key[64], val[64];
    unsigned id, s, z, p;
    int dev, n, known = 0;
    kv_load();
    dev = handle_index(device);
    if (dev < 0 || !placement || !gpu_instance) return INVALID_ARGUMENT;
    if (!kv_int("mig", 0)) return NOT_SUPPORTED;
    if (kv_int("create_error", 0)) return (nvmlReturn_t)kv_int("create_error", 0);
    for (n = 0; n < kv_int("profiles", 0); n++) known |= profile_int(n, "id", -1) == (long)profile_id;
    if (!known) return INVALID_ARGUMENT;
    for (id = 0; id < 256; id++) { /* no overlap with a live GI of this device */
        const char *v = gi_get(dev, id);
        if (v && sscanf(v, "%u:%u:%u", &p, &s, &z) == 3 && placement->start < s + z && s < placement->start + placement->size)
            return INSUFFICIENT_RESOURCES;
    }
    for (id = (unsigned)kv_int("gi_id_base", 3); id < 256 && gi_get(dev, id); id++) {}
    if (id >= 256) return INSUFFICIENT_RESOURCES;
    snprintf(key, sizeof key, "gi.%d.%u", dev, id);
    snprintf(val, sizeof val, "%u:%u:%u", profile_id, placement->start, placement->size);
    kv_set(key, val);
    *gpu_instance = gi_handle(dev, id);
    return OK;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(void *gpu_instance, GpuInstanceInfo *info) {
    int dev;
    unsigned gi, p, s, z;
    const char *v;
    kv_load();
    if (!info || gi_of(gpu_instance, &dev, &gi)) return INVALID_ARGUMENT;
    v = gi_get(dev, gi);
    if (!v || sscanf(v, "%u:%u:%u", &p, &s, &z) != 3) return NOT_FOUND;
    info->device = (void *)(size_t)(dev + 1);
    info->id = gi;
    info->profileId = p;
    info->placement.start = s;
    info->placement.size = z;
    return OK;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(void *device, unsigned int id, void **gpu_instance) {
    int dev;
    kv_load();
    dev = handle_index(device);
    if (dev < 0 || !gpu_instance) return INVALID_ARGUMENT;
    if (!gi_get(dev, id)) return NOT_FOUND;
    *gpu_instance = gi_handle(dev, id);
    return OK;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(void *gpu_instance, unsigned int profile, void **compute_instance) {
    char key[64], val[32], path[4096];
    int dev;
    unsigned gi, ci = 0;
    FILE *fh;
    kv_load();
    if (!compute_instance || gi_of(gpu_instance, &dev, &gi)) return INVALID_ARGUMENT;
    if (!gi_get(dev, gi)) return NOT_FOUND;
    if (kv_int("ci_create_error", 0)) return (nvmlReturn_t)kv_int("ci_create_error", 0);
    snprintf(key, sizeof key, "ci.%d.%u.%u", dev, gi, ci);
    if (kv_get(key)) return INSUFFICIENT_RESOURCES; /* one CI spans the whole GI */
    snprintf(val, sizeof val, "%u", profile);
    kv_set(key, val);
    if (kv_get("registry") && !kv_int("registry_skip", 0)) {
        registry_file(dev, gi, ci, path, sizeof path);
        fh = fopen(path, "w");
        if (fh) {
            fprintf(fh, "gi_id: %u\ngi_profile_id: %s\nci_id: %u\nci_profile_id: %u\n", gi, gi_get(dev, gi), ci, profile);
            fprintf(fh, "mig_uuid: %08x-0000-4000-8000-%012x\n", (unsigned)dev, gi * 256 + ci);
            fclose(fh);
        }
    }
    *compute_instance = ci_handle(dev, gi, ci);
    return OK;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(void *gpu_instance, unsigned int id, void **compute_instance) {
    char key[64];
    int dev;
    unsigned gi;
    kv_load();
    if (!compute_instance || gi_of(gpu_instance, &dev, &gi)) return INVALID_ARGUMENT;
    snprintf(key, sizeof key, "ci.%d.%u.%u", dev, gi, id);
    if (!kv_get(key)) return NOT_FOUND;
    *compute_instance = ci_handle(dev, gi, id);
    return OK;
}

nvmlReturn_t nvmlComputeInstanceGetInfo(void *compute_instance, ComputeInstanceInfo *info) {
    char key[64];
    int dev;
    unsigned gi, ci;
    kv_load();
    if (!info || ci_of(compute_instance, &dev, &gi, &ci)) return INVALID_ARGUMENT;
    snprintf(key, sizeof key, "ci.%d.%u.%u", dev, gi, ci);
    if (!kv_get(key)) return NOT_FOUND;
    memset(info, 0, sizeof *info);
    info->device = (void *)(size_t)(dev + 1);
    info->gpuInstance = gi_handle(dev, gi);
    info->id = ci;
    info->profileId = (unsigned)kv_int(key, 0);
    return OK;
}

nvmlReturn_t nvmlComputeInstanceDestroy(void *compute_instance) {
    char key[64], path[4096];
    int dev;
    unsigned gi, ci;
    kv_load();
    if (ci_of(compute_instance, &dev, &gi, &ci)) return INVALID_ARGUMENT;
    if (kv_int("destroy_error", 0)) return (nvmlReturn_t)kv_int("destroy_error", 0);
    snprintf(key, sizeof key, "ci.%d.%u.%u", dev, gi, ci);
    if (!kv_get(key)) return NOT_FOUND;
    kv_del(key);
    if (kv_get("registry")) {
        registry_file(dev, gi, ci, path, sizeof path);
        unlink(path);
    }
    return OK;
}

nvmlReturn_t nvmlGpuInstanceDestroy(void *gpu_instance) {
    char key[64];
    int dev, i;
    unsigned gi;
    kv_load();
    if (gi_of(gpu_instance, &dev, &gi)) return INVALID_ARGUMENT;
    if (kv_int("destroy_error", 0)) return (nvmlReturn_t)kv_int("destroy_error", 0);
    if (!gi_get(dev, gi)) return NOT_FOUND;
    for (i = 0; i < 256; i++) { /* a GI with a compute instance left is in use */
        snprintf(key, sizeof key, "ci.%d.%u.%d", dev, gi, i);
        if (kv_get(key)) return IN_USE;
    }
    snprintf(key, sizeof key, "gi.%d.%u", dev, gi);
    kv_del(key);
    return OK;
}
