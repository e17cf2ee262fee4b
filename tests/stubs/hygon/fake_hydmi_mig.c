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
