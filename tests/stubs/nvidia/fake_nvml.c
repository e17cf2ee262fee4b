/*
 * A stand-in for libnvidia-ml.so.1 (NVML) inside a fixture node.
 *
 * It exports the NVML entry points the operator's detection, monitor and MIG-mode code reach
 * through the nvidia-ml-py binding (pynvml), with NVML's real C signatures and struct layouts
 * (copied from pynvml's ctypes definitions, which mirror nvml.h), and serves the data in
 * "<this library's path>.fixture" (found through dladdr), so the production code loads it by path
 * exactly as it would load the driver's copy.
 *
 * The data file is read at every nvmlInit (a state change made by another process is seen) and is
 * line oriented:
 *
 *   # comment
 *   init_error=9                  nvmlInit* returns this code (9 = NVML_ERROR_DRIVER_NOT_LOADED)
 *   count_error=999               nvmlDeviceGetCount_v2 returns this code
 *   driver_version=550.54.15
 *   cuda_driver_version=12040     nvmlSystemGetCudaDriverVersion(_v2)
 *   [device]                      one section per device, in NVML enumeration order
 *   index=0                       nvmlDeviceGetIndex
 *   minor=0
 *   name=NVIDIA H100 80GB HBM3
 *   uuid=GPU-...
 *   bus_id=00000000:1B:00.0       nvmlPciInfo_t.busId (busIdLegacy gets the 4-digit domain form)
 *   pci_device_id=0x233010DE
 *   pci_subsystem_id=0x16C110DE
 *   memory_total=<bytes>  memory_reserved=<bytes>  memory_used=<bytes>   (v2 "used" excludes reserved)
 *   cc_major=9  cc_minor=0  architecture=9  cores=16896  memory_bus_width=5120
 *   ecc_current=1  ecc_pending=1  ecc_uncorrected_volatile_dram=0
 *   mig_current=0  mig_pending=0  mig_activation=0   (activation status a SetMigMode reports;
 *                                                     non-zero leaves the change pending)
 *   utilization_gpu=..  utilization_memory=..  temperature=..  power_mw=..
 *   gi_profile=<probe index> <profile id> <name> <slices> <instances> <SMs> <CE> <dec> <enc>
 *              <jpeg> <ofa> <memory MiB> <start:size,start:size,...>
 *
 * A key that is absent means the device does not support that query (NVML_ERROR_NOT_SUPPORTED):
 * no mig_* keys = a card without MIG, no cores = a driver without nvmlDeviceGetNumGpuCores, etc.
 * Failure injection: <call>_error=<code> in a device section makes that call return the code:
 * handle_error, uuid_error, name_error, pci_error, memory_error, utilization_error,
 * temperature_error, power_error, mig_error (GetMigMode), set_mig_error (SetMigMode).
 *
 * nvmlDeviceSetMigMode persists mig_current / mig_pending by rewriting that device's lines in the
 * data file, so tests that change a mode must work on a copy of the fixture node.
 *
 * MIG instances (issue 10, the partitioner): on a device whose mig_current=1, GPU instances are
 * created at a placement of one of its gi_profile lines (nvmlDeviceCreateGpuInstance[WithPlacement]:
 * an illegal placement is NVML_ERROR_INVALID_ARGUMENT, one overlapping a live instance or beyond the
 * profile's instance count NVML_ERROR_INSUFFICIENT_RESOURCES), compute instances inside them (the
 * compute profiles are derived from the GPU instance's slice count: 1, 2, 3, 4, 7, 8, 6 slices for
 * NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE .. _6_SLICE, those that fit), and each compute instance is a
 * MIG device (nvmlDeviceGetMaxMigDeviceCount / GetMigDeviceHandleByIndex / GetGpuInstanceId /
 * GetComputeInstanceId / GetUUID / GetHandleByUUID) whose UUID "MIG-..." is derived from the parent
 * UUID and the two instance ids. A GPU instance holding compute instances refuses to be destroyed
 * (NVML_ERROR_IN_USE). Failure injection in a device section: create_gi_error, create_ci_error,
 * destroy_gi_error, destroy_ci_error. The instances live in process memory and are mirrored in
 * "<data file>.instances" (re-read at every nvmlInit, like the data file), so a second process --
 * or the next session of this one -- sees them; tests that create instances work on a copy.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96

/* nvml.h layouts (pynvml: nvmlPciInfo_t, c_nvmlMemory_t, c_nvmlMemory_v2_t, c_nvmlUtilization_t,
 * c_nvmlGpuInstancePlacement_t, c_nvmlGpuInstanceProfileInfo_t / _v2_t, c_nvmlTemperature_v1_t). */
typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 0x02000028u

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct {
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int isP2pSupported;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int copyEngineCount;
    unsigned int decoderCount;
    unsigned int encoderCount;
    unsigned int jpegCount;
    unsigned int ofaCount;
    unsigned long long memorySizeMB;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;
#define nvmlGpuInstanceProfileInfo_v2 0x02000098u

typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define nvmlTemperature_v1 0x0100000Cu

/* The layouts must match the version words NVML encodes their sizes in. */
_Static_assert(sizeof(nvmlMemory_v2_t) == (nvmlMemory_v2 & 0xffffff), "nvmlMemory_v2_t size");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == (nvmlGpuInstanceProfileInfo_v2 & 0xffffff),
               "nvmlGpuInstanceProfileInfo_v2_t size");
_Static_assert(sizeof(nvmlTemperature_v1_t) == (nvmlTemperature_v1 & 0xffffff), "nvmlTemperature_v1_t size");
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t size");

/* -- fixture data ------------------------------------------------------------------------------ */

#define MAX_DEVICES 16
#define MAX_PROFILES 18 /* NVML_GPU_INSTANCE_PROFILE_COUNT */
#define MAX_PLACEMENTS 8
#define UNSET (-1LL)

typedef struct {
    unsigned int probe_index;
    unsigned int id;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    unsigned int slices, instances, sms, ce, dec, enc, jpeg, ofa;
    unsigned long long memory_mb;
    unsigned int nplacements;
    nvmlGpuInstancePlacement_t placements[MAX_PLACEMENTS];
} profile_t;

typedef struct nvmlDevice_st {
    int ordinal; /* position in the data file (= enumeration order) */
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char uuid[96];
    char bus_id[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    long long index, minor, pci_device_id, pci_subsystem_id;
    long long memory_total, memory_reserved, memory_used;
    long long cc_major, cc_minor, architecture, cores, memory_bus_width;
    long long ecc_current, ecc_pending, ecc_uncorrected;
    long long mig_current, mig_pending, mig_activation;
    long long util_gpu, util_memory, temperature, power_mw;
    long long handle_error, uuid_error, name_error, pci_error, memory_error, utilization_error;
    long long temperature_error, power_error, mig_error, set_mig_error;
    long long create_gi_error, create_ci_error, destroy_gi_error, destroy_ci_error;
    int nprofiles;
    profile_t profiles[MAX_PROFILES];
} device_t;

typedef device_t *nvmlDevice_t;

static struct {
    long long init_error, count_error, cuda_driver_version;
    char driver_version[80];
    int ndevices;
    device_t devices[MAX_DEVICES];
} data;

static int init_count;
static char data_path[4096];

static const char *fixture_path(void) {
    Dl_info info;
    if (!data_path[0] && dladdr((void *)&fixture_path, &info) && info.dli_fname) {
        snprintf(data_path, sizeof(data_path), "%s.fixture", info.dli_fname);
    }
    return data_path;
}

static void device_defaults(device_t *d, int ordinal) {
    memset(d, 0, sizeof(*d));
    d->ordinal = ordinal;
    long long *unset[] = {
        &d->index, &d->minor, &d->pci_device_id, &d->pci_subsystem_id, &d->memory_total,
        &d->memory_reserved, &d->memory_used, &d->cc_major, &d->cc_minor, &d->architecture,
        &d->cores, &d->memory_bus_width, &d->ecc_current, &d->ecc_pending, &d->ecc_uncorrected,
        &d->mig_current, &d->mig_pending, &d->util_gpu, &d->util_memory, &d->temperature,
        &d->power_mw,
    };
    for (size_t i = 0; i < sizeof(unset) / sizeof(unset[0]); i++) *unset[i] = UNSET;
}

static int parse_profile(device_t *d, const char *value) {
    if (d->nprofiles >= MAX_PROFILES) return -1;
    profile_t *p = &d->profiles[d->nprofiles];
    char placements[256] = "";
    int n = sscanf(value, "%u %u %95s %u %u %u %u %u %u %u %u %llu %255s", &p->probe_index, &p->id,
                   p->name, &p->slices, &p->instances, &p->sms, &p->ce, &p->dec, &p->enc, &p->jpeg,
                   &p->ofa, &p->memory_mb, placements);
    if (n < 12) return -1;
    p->nplacements = 0;
    for (char *tok = strtok(placements, ","); tok && p->nplacements < MAX_PLACEMENTS;
         tok = strtok(NULL, ",")) {
        unsigned int start, size;
        if (sscanf(tok, "%u:%u", &start, &size) == 2) {
            p->placements[p->nplacements].start = start;
            p->placements[p->nplacements].size = size;
            p->nplacements++;
        }
    }
    d->nprofiles++;
    return 0;
}

static void set_device_key(device_t *d, const char *key, const char *value) {
    struct {
        const char *key;
        long long *field;
    } numbers[] = {
        {"index", &d->index}, {"minor", &d->minor}, {"pci_device_id", &d->pci_device_id},
        {"pci_subsystem_id", &d->pci_subsystem_id}, {"memory_total", &d->memory_total},
        {"memory_reserved", &d->memory_reserved}, {"memory_used", &d->memory_used},
        {"cc_major", &d->cc_major}, {"cc_minor", &d->cc_minor}, {"architecture", &d->architecture},
        {"cores", &d->cores}, {"memory_bus_width", &d->memory_bus_width},
        {"ecc_current", &d->ecc_current}, {"ecc_pending", &d->ecc_pending},
        {"ecc_uncorrected_volatile_dram", &d->ecc_uncorrected}, {"mig_current", &d->mig_current},
        {"mig_pending", &d->mig_pending}, {"mig_activation", &d->mig_activation},
        {"utilization_gpu", &d->util_gpu}, {"utilization_memory", &d->util_memory},
        {"temperature", &d->temperature}, {"power_mw", &d->power_mw},
        {"handle_error", &d->handle_error}, {"uuid_error", &d->uuid_error},
        {"name_error", &d->name_error}, {"pci_error", &d->pci_error},
        {"memory_error", &d->memory_error}, {"utilization_error", &d->utilization_error},
        {"temperature_error", &d->temperature_error}, {"power_error", &d->power_error},
        {"mig_error", &d->mig_error}, {"set_mig_error", &d->set_mig_error},
        {"create_gi_error", &d->create_gi_error}, {"create_ci_error", &d->create_ci_error},
        {"destroy_gi_error", &d->destroy_gi_error}, {"destroy_ci_error", &d->destroy_ci_error},
    };
    if (!strcmp(key, "name")) {
        snprintf(d->name, sizeof(d->name), "%s", value);
    } else if (!strcmp(key, "uuid")) {
        snprintf(d->uuid, sizeof(d->uuid), "%s", value);
    } else if (!strcmp(key, "bus_id")) {
        snprintf(d->bus_id, sizeof(d->bus_id), "%s", value);
    } else if (!strcmp(key, "gi_profile")) {
        if (parse_profile(d, value) != 0) fprintf(stderr, "fake_nvml: bad gi_profile line: %s\n", value);
    } else {
        for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++) {
            if (!strcmp(key, numbers[i].key)) {
                *numbers[i].field = strtoll(value, NULL, 0);
                return;
            }
        }
        fprintf(stderr, "fake_nvml: unknown device key %s\n", key);
    }
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    char *end = s + strlen(s);
    while (end > s && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t')) *--end = 0;
    return s;
}

static int load_data(void) {
    FILE *f = fopen(fixture_path(), "r");
    if (!f) {
        fprintf(stderr, "fake_nvml: cannot read %s\n", fixture_path());
        return -1;
    }
    memset(&data, 0, sizeof(data));
    data.cuda_driver_version = UNSET;
    device_t *current = NULL;
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        char *s = trim(line);
        if (!*s || *s == '#') continue;
        if (!strcmp(s, "[device]")) {
            if (data.ndevices >= MAX_DEVICES) break;
            current = &data.devices[data.ndevices];
            device_defaults(current, data.ndevices);
            data.ndevices++;
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq) continue;
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1);
        if (current) {
            set_device_key(current, key, value);
        } else if (!strcmp(key, "init_error")) {
            data.init_error = strtoll(value, NULL, 0);
        } else if (!strcmp(key, "count_error")) {
            data.count_error = strtoll(value, NULL, 0);
        } else if (!strcmp(key, "driver_version")) {
            snprintf(data.driver_version, sizeof(data.driver_version), "%s", value);
        } else if (!strcmp(key, "cuda_driver_version")) {
            data.cuda_driver_version = strtoll(value, NULL, 0);
        }
    }
    fclose(f);
    return 0;
}

/* Rewrite mig_current / mig_pending of one device section in the data file (atomically). */
static int persist_mig(const device_t *d) {
    const char *path = fixture_path();
    FILE *in = fopen(path, "r");
    if (!in) return -1;
    char tmp[4200];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return -1;
    }
    int ordinal = -1;
    char line[1024];
    while (fgets(line, sizeof(line), in)) {
        char copy[1024];
        snprintf(copy, sizeof(copy), "%s", line);
        char *s = trim(copy);
        if (!strcmp(s, "[device]")) ordinal++;
        if (ordinal == d->ordinal && !strncmp(s, "mig_current=", 12)) {
            fprintf(out, "mig_current=%lld\n", d->mig_current);
        } else if (ordinal == d->ordinal && !strncmp(s, "mig_pending=", 12)) {
            fprintf(out, "mig_pending=%lld\n", d->mig_pending);
        } else {
            fputs(line, out);
        }
    }
    fclose(in);
    if (fclose(out) != 0) return -1;
    return rename(tmp, path);
}

/* -- helpers ----------------------------------------------------------------------------------- */

#define REQUIRE_INIT()                                   \
    do {                                                 \
        if (init_count == 0) return NVML_ERROR_UNINITIALIZED; \
    } while (0)

#define REQUIRE_DEVICE(dev)                              \
    do {                                                 \
        REQUIRE_INIT();                                  \
        if (!valid_device(dev)) return NVML_ERROR_INVALID_ARGUMENT; \
    } while (0)

static int valid_device(nvmlDevice_t dev) {
    return dev && dev >= data.devices && dev < data.devices + data.ndevices;
}

static nvmlReturn_t copy_string(char *dst, unsigned int length, const char *src) {
    if (!dst) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static const profile_t *profile_by_index(const device_t *d, unsigned int probe_index) {
    for (int i = 0; i < d->nprofiles; i++)
        if (d->profiles[i].probe_index == probe_index) return &d->profiles[i];
    return NULL;
}

static const profile_t *profile_by_id(const device_t *d, unsigned int id) {
    for (int i = 0; i < d->nprofiles; i++)
        if (d->profiles[i].id == id) return &d->profiles[i];
    return NULL;
}

/* -- MIG instances ------------------------------------------------------------------------------ */

#define MAX_GIS 64
#define MAX_CIS 128
#define CI_PROFILE_COUNT 7 /* NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE .. _6_SLICE */
static const unsigned int ci_profile_slices[CI_PROFILE_COUNT] = {1, 2, 3, 4, 7, 8, 6};

typedef struct nvmlGpuInstance_st {
    int used;
    int device; /* ordinal */
    unsigned int id, profile_id, start, size;
} gi_t;

typedef struct nvmlComputeInstance_st {
    int used;
    int device;
    unsigned int gi_id, id, profile_id, slices;
} ci_t;

typedef gi_t *nvmlGpuInstance_t;
typedef ci_t *nvmlComputeInstance_t;

static gi_t gis[MAX_GIS];
static ci_t cis[MAX_CIS];

static gi_t *gi_of(nvmlGpuInstance_t gi) {
    return (gi && gi >= gis && gi < gis + MAX_GIS && gi->used) ? gi : NULL;
}

static ci_t *ci_of(nvmlComputeInstance_t ci) {
    return (ci && ci >= cis && ci < cis + MAX_CIS && ci->used) ? ci : NULL;
}

/* A MIG device handle is a compute instance seen as an nvmlDevice_t. */
static ci_t *mig_of(nvmlDevice_t device) {
    void *p = (void *)device;
    return ci_of((ci_t *)p);
}

static nvmlDevice_t as_device(ci_t *ci) { return (nvmlDevice_t)(void *)ci; }

static gi_t *gi_by_id(int device, unsigned int id) {
    for (int i = 0; i < MAX_GIS; i++)
        if (gis[i].used && gis[i].device == device && gis[i].id == id) return &gis[i];
    return NULL;
}

static unsigned long long fnv1a(const char *text, unsigned long long seed) {
    unsigned long long h = 1469598103934665603ULL ^ seed;
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        h ^= *c;
        h *= 1099511628211ULL;
    }
    return h;
}

static void mig_uuid(const ci_t *ci, char *out, size_t size) {
    char key[160];
    snprintf(key, sizeof(key), "%s/%u/%u", data.devices[ci->device].uuid, ci->gi_id, ci->id);
    unsigned long long a = fnv1a(key, 0), b = fnv1a(key, 0x9e3779b97f4a7c15ULL);
    snprintf(out, size, "MIG-%08llx-%04llx-%04llx-%04llx-%012llx", a >> 32, (a >> 16) & 0xffff, a & 0xffff,
             b >> 48, b & 0xffffffffffffULL);
}

static nvmlReturn_t mig_handle_by_uuid(const char *uuid, nvmlDevice_t *device) {
    char text[96];
    for (int i = 0; i < MAX_CIS; i++) {
        if (!cis[i].used) continue;
        mig_uuid(&cis[i], text, sizeof(text));
        if (!strcmp(text, uuid)) {
            *device = as_device(&cis[i]);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static const char *instances_path(void) {
    static char path[4200];
    snprintf(path, sizeof(path), "%s.instances", fixture_path());
    return path;
}

static int device_by_uuid(const char *uuid) {
    for (int i = 0; i < data.ndevices; i++)
        if (!strcmp(data.devices[i].uuid, uuid)) return i;
    return -1;
}

/* Re-read the instances another session (or process) left: "gi <parent uuid> <id> <profile id>
 * <start> <size>" and "ci <parent uuid> <gi id> <id> <profile id> <slices>" lines. */
static void load_instances(void) {
    memset(gis, 0, sizeof(gis));
    memset(cis, 0, sizeof(cis));
    FILE *f = fopen(instances_path(), "r");
    if (!f) return;
    char line[512], uuid[96];
    int ngi = 0, nci = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned int a, b, c, d;
        if (sscanf(line, "gi %95s %u %u %u %u", uuid, &a, &b, &c, &d) == 5 && ngi < MAX_GIS) {
            int dev = device_by_uuid(uuid);
            if (dev < 0) continue;
            gis[ngi++] = (gi_t){1, dev, a, b, c, d};
        } else if (sscanf(line, "ci %95s %u %u %u %u", uuid, &a, &b, &c, &d) == 5 && nci < MAX_CIS) {
            int dev = device_by_uuid(uuid);
            if (dev < 0) continue;
            cis[nci++] = (ci_t){1, dev, a, b, c, d};
        }
    }
    fclose(f);
}

static int persist_instances(void) {
    char tmp[4300];
    snprintf(tmp, sizeof(tmp), "%s.tmp", instances_path());
    FILE *out = fopen(tmp, "w");
    if (!out) return -1;
    for (int i = 0; i < MAX_GIS; i++)
        if (gis[i].used)
            fprintf(out, "gi %s %u %u %u %u\n", data.devices[gis[i].device].uuid, gis[i].id, gis[i].profile_id,
                    gis[i].start, gis[i].size);
    for (int i = 0; i < MAX_CIS; i++)
        if (cis[i].used)
            fprintf(out, "ci %s %u %u %u %u\n", data.devices[cis[i].device].uuid, cis[i].gi_id, cis[i].id,
                    cis[i].profile_id, cis[i].slices);
    if (fclose(out) != 0) return -1;
    return rename(tmp, instances_path());
}

/* -- the NVML API ------------------------------------------------------------------------------ */

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 8: return "Insufficient External Power";
    case 9: return "Driver Not Loaded";
    case 10: return "Timeout";
    case 11: return "Interrupt Request Issue";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 14: return "Corrupted infoROM";
    case 15: return "GPU is lost";
    case 16: return "GPU requires restart";
    case 17: return "The operating system has blocked the request.";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    case 19: return "In use by another client";
    case 20: return "Insufficient Memory";
    case 21: return "No data";
    case 23: return "Insufficient Resources";
    case 25: return "Argument version mismatch";
    case 27: return "Not Ready";
    case 28: return "GPU not found";
    case 29: return "Invalid state";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    if (init_count == 0) {
        if (load_data() != 0) return NVML_ERROR_UNKNOWN;
        if (data.init_error) return (nvmlReturn_t)data.init_error;
        load_instances();
    }
    init_count++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    REQUIRE_INIT();
    init_count--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    REQUIRE_INIT();
    if (!data.driver_version[0]) return NVML_ERROR_NOT_SUPPORTED;
    return copy_string(version, length, data.driver_version);
}

static nvmlReturn_t cuda_driver_version(int *version) {
    REQUIRE_INIT();
    if (!version) return NVML_ERROR_INVALID_ARGUMENT;
    if (data.cuda_driver_version == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *version = (int)data.cuda_driver_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion) {
    return cuda_driver_version(cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion) {
    return cuda_driver_version(cudaDriverVersion);
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    REQUIRE_INIT();
    if (!deviceCount) return NVML_ERROR_INVALID_ARGUMENT;
    if (data.count_error) return (nvmlReturn_t)data.count_error;
    *deviceCount = (unsigned int)data.ndevices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    REQUIRE_INIT();
    if (!device || index >= (unsigned int)data.ndevices) return NVML_ERROR_INVALID_ARGUMENT;
    if (data.devices[index].handle_error) return (nvmlReturn_t)data.devices[index].handle_error;
    *device = &data.devices[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    REQUIRE_INIT();
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    if (!strncmp(uuid, "MIG-", 4)) return mig_handle_by_uuid(uuid, device);
    for (int i = 0; i < data.ndevices; i++) {
        device_t *d = &data.devices[i];
        if (!d->uuid_error && !d->handle_error && !strcmp(d->uuid, uuid)) {
            *device = d;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    REQUIRE_DEVICE(device);
    if (device->name_error) return (nvmlReturn_t)device->name_error;
    return copy_string(name, length, device->name);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    REQUIRE_INIT();
    if (mig_of(device)) {
        char text[96];
        mig_uuid(mig_of(device), text, sizeof(text));
        return copy_string(uuid, length, text);
    }
    REQUIRE_DEVICE(device);
    if (device->uuid_error) return (nvmlReturn_t)device->uuid_error;
    return copy_string(uuid, length, device->uuid);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    REQUIRE_DEVICE(device);
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned int)(device->index == UNSET ? device->ordinal : device->index);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    REQUIRE_DEVICE(device);
    if (!minorNumber) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->minor == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *minorNumber = (unsigned int)device->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    REQUIRE_DEVICE(device);
    if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->pci_error) return (nvmlReturn_t)device->pci_error;
    memset(pci, 0, sizeof(*pci));
    unsigned int domain = 0, bus = 0, dev = 0, fn = 0;
    if (sscanf(device->bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return NVML_ERROR_UNKNOWN;
    pci->domain = domain;
    pci->bus = bus;
    pci->device = dev;
    pci->pciDeviceId = (unsigned int)(device->pci_device_id == UNSET ? 0 : device->pci_device_id);
    pci->pciSubSystemId = (unsigned int)(device->pci_subsystem_id == UNSET ? 0 : device->pci_subsystem_id);
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.%X", domain & 0xffff, bus, dev, fn);
    snprintf(pci->busId, sizeof(pci->busId), "%s", device->bus_id);
    return NVML_SUCCESS;
}

static nvmlReturn_t memory_figures(nvmlDevice_t device) {
    if (device->memory_error) return (nvmlReturn_t)device->memory_error;
    if (device->memory_total == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

static unsigned long long nz(long long v) { return v == UNSET ? 0 : (unsigned long long)v; }

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    REQUIRE_DEVICE(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t ret = memory_figures(device);
    if (ret != NVML_SUCCESS) return ret;
    /* v1 counts the driver-reserved memory as used */
    memory->total = nz(device->memory_total);
    memory->used = nz(device->memory_used) + nz(device->memory_reserved);
    memory->free = memory->total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    REQUIRE_DEVICE(device);
    if (!memory) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t ret = memory_figures(device);
    if (ret != NVML_SUCCESS) return ret;
    memory->total = nz(device->memory_total);
    memory->reserved = nz(device->memory_reserved);
    memory->used = nz(device->memory_used);
    memory->free = memory->total - memory->reserved - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    REQUIRE_DEVICE(device);
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->cc_major == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *major = (int)device->cc_major;
    *minor = (int)nz(device->cc_minor);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch) {
    REQUIRE_DEVICE(device);
    if (!arch) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->architecture == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *arch = (unsigned int)device->architecture;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores) {
    REQUIRE_DEVICE(device);
    if (!numCores) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->cores == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *numCores = (unsigned int)device->cores;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth) {
    REQUIRE_DEVICE(device);
    if (!busWidth) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->memory_bus_width == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *busWidth = (unsigned int)device->memory_bus_width;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    REQUIRE_DEVICE(device);
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->ecc_current == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *current = (unsigned int)device->ecc_current;
    *pending = (unsigned int)(device->ecc_pending == UNSET ? device->ecc_current : device->ecc_pending);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, unsigned int errorType,
                                             unsigned int counterType, unsigned int locationType,
                                             unsigned long long *count) {
    REQUIRE_DEVICE(device);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->ecc_current != 1) return NVML_ERROR_NOT_SUPPORTED; /* counters need ECC on */
    (void)locationType;
    *count = (errorType == 1 && counterType == 0) ? nz(device->ecc_uncorrected) : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    REQUIRE_DEVICE(device);
    if (!utilization) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->utilization_error) return (nvmlReturn_t)device->utilization_error;
    if (device->util_gpu == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = (unsigned int)device->util_gpu;
    utilization->memory = (unsigned int)nz(device->util_memory);
    return NVML_SUCCESS;
}

static nvmlReturn_t temperature(nvmlDevice_t device, unsigned int sensor, int *value) {
    if (device->temperature_error) return (nvmlReturn_t)device->temperature_error;
    if (sensor != 0) return NVML_ERROR_INVALID_ARGUMENT; /* NVML_TEMPERATURE_GPU only */
    if (device->temperature == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *value = (int)device->temperature;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensorType, unsigned int *temp) {
    REQUIRE_DEVICE(device);
    if (!temp) return NVML_ERROR_INVALID_ARGUMENT;
    int value = 0;
    nvmlReturn_t ret = temperature(device, sensorType, &value);
    if (ret == NVML_SUCCESS) *temp = (unsigned int)value;
    return ret;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temp) {
    REQUIRE_DEVICE(device);
    if (!temp) return NVML_ERROR_INVALID_ARGUMENT;
    if (temp->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    return temperature(device, temp->sensorType, &temp->temperature);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    REQUIRE_DEVICE(device);
    if (!power) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->power_error) return (nvmlReturn_t)device->power_error;
    if (device->power_mw == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *power = (unsigned int)device->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode) {
    REQUIRE_DEVICE(device);
    if (!currentMode || !pendingMode) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->mig_error) return (nvmlReturn_t)device->mig_error;
    if (device->mig_current == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = (unsigned int)device->mig_current;
    *pendingMode = (unsigned int)(device->mig_pending == UNSET ? device->mig_current : device->mig_pending);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t *activationStatus) {
    REQUIRE_DEVICE(device);
    if (!activationStatus || mode > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->set_mig_error) return (nvmlReturn_t)device->set_mig_error;
    if (device->mig_current == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    device->mig_pending = mode;
    *activationStatus = (nvmlReturn_t)device->mig_activation;
    if (device->mig_activation == NVML_SUCCESS) device->mig_current = mode;
    if (persist_mig(device) != 0) return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

/* The fields v1 and v2 of nvmlGpuInstanceProfileInfo share (a macro: two distinct struct types). */
#define FILL_PROFILE(info, p)                      \
    do {                                           \
        (info)->id = (p)->id;                      \
        (info)->isP2pSupported = 0;                \
        (info)->sliceCount = (p)->slices;          \
        (info)->instanceCount = (p)->instances;    \
        (info)->multiprocessorCount = (p)->sms;    \
        (info)->copyEngineCount = (p)->ce;         \
        (info)->decoderCount = (p)->dec;           \
        (info)->encoderCount = (p)->enc;           \
        (info)->jpegCount = (p)->jpeg;             \
        (info)->ofaCount = (p)->ofa;               \
        (info)->memorySizeMB = (p)->memory_mb;     \
    } while (0)

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info) {
    REQUIRE_DEVICE(device);
    if (!info || profile >= MAX_PROFILES) return NVML_ERROR_INVALID_ARGUMENT;
    const profile_t *p = profile_by_index(device, profile);
    if (device->mig_current == UNSET || !p) return NVML_ERROR_NOT_SUPPORTED;
    FILL_PROFILE(info, p);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info) {
    REQUIRE_DEVICE(device);
    if (!info || profile >= MAX_PROFILES) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlGpuInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const profile_t *p = profile_by_index(device, profile);
    if (device->mig_current == UNSET || !p) return NVML_ERROR_NOT_SUPPORTED;
    FILL_PROFILE(info, p);
    snprintf(info->name, sizeof(info->name), "%s", p->name);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count) {
    REQUIRE_DEVICE(device);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    const profile_t *p = profile_by_id(device, profileId);
    if (device->mig_current == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    if (!placements) {
        *count = p->nplacements;
        return NVML_SUCCESS;
    }
    if (*count < p->nplacements) {
        *count = p->nplacements;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(placements, p->placements, p->nplacements * sizeof(*placements));
    *count = p->nplacements;
    return NVML_SUCCESS;
}

/* -- MIG GPU / compute instances ---------------------------------------------------------------- */

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

typedef struct {
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct {
    unsigned int version;
    unsigned int id;
    unsigned int sliceCount;
    unsigned int instanceCount;
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
#define nvmlComputeInstanceProfileInfo_v2 0x02000088u
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) == (nvmlComputeInstanceProfileInfo_v2 & 0xffffff),
               "nvmlComputeInstanceProfileInfo_v2_t size");

static int mig_enabled(const device_t *d) { return d->mig_current == 1; }

static nvmlReturn_t create_gi(nvmlDevice_t device, unsigned int profileId, unsigned int start, int any_start,
                              nvmlGpuInstance_t *out) {
    if (!mig_enabled(device)) return NVML_ERROR_NOT_SUPPORTED;
    if (device->create_gi_error) return (nvmlReturn_t)device->create_gi_error;
    const profile_t *p = profile_by_id(device, profileId);
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int live = 0, used_ids[MAX_GIS + 1] = {0};
    unsigned char busy[64] = {0};
    for (int i = 0; i < MAX_GIS; i++) {
        const gi_t *g = &gis[i];
        if (!g->used || g->device != device->ordinal) continue;
        if (g->profile_id == profileId) live++;
        if (g->id <= MAX_GIS) used_ids[g->id] = 1;
        for (unsigned int s = g->start; s < g->start + g->size && s < sizeof(busy); s++) busy[s] = 1;
    }
    if (live >= p->instances) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    const nvmlGpuInstancePlacement_t *chosen = NULL;
    for (unsigned int i = 0; i < p->nplacements; i++) {
        const nvmlGpuInstancePlacement_t *pl = &p->placements[i];
        if (!any_start && pl->start != start) continue;
        int free_slot = 1;
        for (unsigned int s = pl->start; s < pl->start + pl->size && s < sizeof(busy); s++)
            if (busy[s]) free_slot = 0;
        if (!free_slot) {
            if (!any_start) return NVML_ERROR_INSUFFICIENT_RESOURCES;
            continue;
        }
        chosen = pl;
        break;
    }
    if (!chosen) return any_start ? NVML_ERROR_INSUFFICIENT_RESOURCES : NVML_ERROR_INVALID_ARGUMENT;
    gi_t *slot = NULL;
    for (int i = 0; i < MAX_GIS && !slot; i++)
        if (!gis[i].used) slot = &gis[i];
    if (!slot) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned int id = 1;
    while (id <= MAX_GIS && used_ids[id]) id++;
    *slot = (gi_t){1, device->ordinal, id, profileId, chosen->start, chosen->size};
    if (persist_instances() != 0) {
        slot->used = 0;
        return NVML_ERROR_UNKNOWN;
    }
    *out = slot;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t *placement,
                                                      nvmlGpuInstance_t *gpuInstance) {
    REQUIRE_DEVICE(device);
    if (!placement || !gpuInstance) return NVML_ERROR_INVALID_ARGUMENT;
    const profile_t *p = profile_by_id(device, profileId);
    if (p) { /* the size must be the profile's own at that start */
        int legal = 0;
        for (unsigned int i = 0; i < p->nplacements; i++)
            if (p->placements[i].start == placement->start && p->placements[i].size == placement->size) legal = 1;
        if (!legal && mig_enabled(device)) return NVML_ERROR_INVALID_ARGUMENT;
    }
    return create_gi(device, profileId, placement->start, 0, gpuInstance);
}

nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                         nvmlGpuInstance_t *gpuInstance) {
    REQUIRE_DEVICE(device);
    if (!gpuInstance) return NVML_ERROR_INVALID_ARGUMENT;
    return create_gi(device, profileId, 0, 1, gpuInstance);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance) {
    REQUIRE_DEVICE(device);
    if (!gpuInstance) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_enabled(device)) return NVML_ERROR_NOT_SUPPORTED;
    gi_t *g = gi_by_id(device->ordinal, id);
    if (!g) return NVML_ERROR_NOT_FOUND;
    *gpuInstance = g;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances,
                                       unsigned int *count) {
    REQUIRE_DEVICE(device);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_enabled(device)) return NVML_ERROR_NOT_SUPPORTED;
    if (!profile_by_id(device, profileId)) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < MAX_GIS; i++) {
        if (!gis[i].used || gis[i].device != device->ordinal || gis[i].profile_id != profileId) continue;
        if (gpuInstances) gpuInstances[n] = &gis[i];
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info) {
    REQUIRE_INIT();
    gi_t *g = gi_of(gpuInstance);
    if (!g || !info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = &data.devices[g->device];
    info->id = g->id;
    info->profileId = g->profile_id;
    info->placement.start = g->start;
    info->placement.size = g->size;
    return NVML_SUCCESS;
}

static nvmlReturn_t ci_profile(const gi_t *g, unsigned int profile, unsigned int engProfile,
                               nvmlComputeInstanceProfileInfo_t *out, char *name, size_t name_size) {
    const device_t *d = &data.devices[g->device];
    const profile_t *p = profile_by_id(d, g->profile_id);
    if (!p || engProfile != 0) return NVML_ERROR_INVALID_ARGUMENT;
    if (profile >= CI_PROFILE_COUNT || ci_profile_slices[profile] > p->slices) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int slices = ci_profile_slices[profile];
    memset(out, 0, sizeof(*out));
    out->id = profile;
    out->sliceCount = slices;
    out->instanceCount = p->slices / slices;
    out->multiprocessorCount = p->sms * slices / (p->slices ? p->slices : 1);
    out->sharedCopyEngineCount = p->ce;
    out->sharedDecoderCount = p->dec;
    out->sharedEncoderCount = p->enc;
    out->sharedJpegCount = p->jpeg;
    out->sharedOfaCount = p->ofa;
    if (name) {
        if (slices == p->slices) snprintf(name, name_size, "%s", p->name);
        else snprintf(name, name_size, "%uc.%s", slices, p->name);
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info) {
    REQUIRE_INIT();
    gi_t *g = gi_of(gpuInstance);
    if (!g || !info) return NVML_ERROR_INVALID_ARGUMENT;
    return ci_profile(g, profile, engProfile, info, NULL, 0);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info) {
    REQUIRE_INIT();
    gi_t *g = gi_of(gpuInstance);
    if (!g || !info) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != nvmlComputeInstanceProfileInfo_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlComputeInstanceProfileInfo_t v1;
    nvmlReturn_t ret = ci_profile(g, profile, engProfile, &v1, info->name, sizeof(info->name));
    if (ret != NVML_SUCCESS) return ret;
    info->id = v1.id;
    info->sliceCount = v1.sliceCount;
    info->instanceCount = v1.instanceCount;
    info->multiprocessorCount = v1.multiprocessorCount;
    info->sharedCopyEngineCount = v1.sharedCopyEngineCount;
    info->sharedDecoderCount = v1.sharedDecoderCount;
    info->sharedEncoderCount = v1.sharedEncoderCount;
    info->sharedJpegCount = v1.sharedJpegCount;
    info->sharedOfaCount = v1.sharedOfaCount;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t *computeInstance) {
    REQUIRE_INIT();
    gi_t *g = gi_of(gpuInstance);
    if (!g || !computeInstance) return NVML_ERROR_INVALID_ARGUMENT;
    const device_t *d = &data.devices[g->device];
    if (d->create_ci_error) return (nvmlReturn_t)d->create_ci_error;
    nvmlComputeInstanceProfileInfo_t info;
    nvmlReturn_t ret = ci_profile(g, profileId, 0, &info, NULL, 0);
    if (ret != NVML_SUCCESS) return ret;
    const profile_t *p = profile_by_id(d, g->profile_id);
    unsigned int taken = 0, used_ids[MAX_CIS + 1] = {0};
    for (int i = 0; i < MAX_CIS; i++) {
        if (!cis[i].used || cis[i].device != g->device || cis[i].gi_id != g->id) continue;
        taken += cis[i].slices;
        if (cis[i].id <= MAX_CIS) used_ids[cis[i].id] = 1;
    }
    if (taken + info.sliceCount > p->slices) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    ci_t *slot = NULL;
    for (int i = 0; i < MAX_CIS && !slot; i++)
        if (!cis[i].used) slot = &cis[i];
    if (!slot) return NVML_ERROR_INSUFFICIENT_RESOURCES;
    unsigned int id = 0;
    while (id < MAX_CIS && used_ids[id]) id++;
    *slot = (ci_t){1, g->device, g->id, id, profileId, info.sliceCount};
    if (persist_instances() != 0) {
        slot->used = 0;
        return NVML_ERROR_UNKNOWN;
    }
    *computeInstance = slot;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance) {
    REQUIRE_INIT();
    gi_t *g = gi_of(gpuInstance);
    if (!g || !computeInstance) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < MAX_CIS; i++) {
        if (cis[i].used && cis[i].device == g->device && cis[i].gi_id == g->id && cis[i].id == id) {
            *computeInstance = &cis[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances, unsigned int *count) {
    REQUIRE_INIT();
    gi_t *g = gi_of(gpuInstance);
    if (!g || !count) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (int i = 0; i < MAX_CIS; i++) {
        if (!cis[i].used || cis[i].device != g->device || cis[i].gi_id != g->id || cis[i].profile_id != profileId)
            continue;
        if (computeInstances) computeInstances[n] = &cis[i];
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info) {
    REQUIRE_INIT();
    ci_t *c = ci_of(computeInstance);
    if (!c || !info) return NVML_ERROR_INVALID_ARGUMENT;
    info->device = &data.devices[c->device];
    info->gpuInstance = gi_by_id(c->device, c->gi_id);
    info->id = c->id;
    info->profileId = c->profile_id;
    info->placement.start = 0;
    info->placement.size = c->slices;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance) {
    REQUIRE_INIT();
    ci_t *c = ci_of(computeInstance);
    if (!c) return NVML_ERROR_INVALID_ARGUMENT;
    if (data.devices[c->device].destroy_ci_error) return (nvmlReturn_t)data.devices[c->device].destroy_ci_error;
    c->used = 0;
    if (persist_instances() != 0) return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance) {
    REQUIRE_INIT();
    gi_t *g = gi_of(gpuInstance);
    if (!g) return NVML_ERROR_INVALID_ARGUMENT;
    if (data.devices[g->device].destroy_gi_error) return (nvmlReturn_t)data.devices[g->device].destroy_gi_error;
    for (int i = 0; i < MAX_CIS; i++)
        if (cis[i].used && cis[i].device == g->device && cis[i].gi_id == g->id) return NVML_ERROR_IN_USE;
    g->used = 0;
    if (persist_instances() != 0) return NVML_ERROR_UNKNOWN;
    return NVML_SUCCESS;
}

/* -- MIG devices (a compute instance as a device handle) ---------------------------------------- */

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    REQUIRE_DEVICE(device);
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->mig_current == UNSET) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int most = 0;
    for (int i = 0; i < device->nprofiles; i++)
        if (device->profiles[i].instances > most) most = device->profiles[i].instances;
    *count = mig_enabled(device) ? most : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice) {
    REQUIRE_DEVICE(device);
    if (!migDevice) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_enabled(device)) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int n = 0;
    for (int i = 0; i < MAX_CIS; i++) {
        if (!cis[i].used || cis[i].device != device->ordinal) continue;
        if (n++ == index) {
            *migDevice = as_device(&cis[i]);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice) {
    REQUIRE_INIT();
    if (!isMigDevice) return NVML_ERROR_INVALID_ARGUMENT;
    if (mig_of(device)) {
        *isMigDevice = 1;
        return NVML_SUCCESS;
    }
    if (!valid_device(device)) return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    REQUIRE_INIT();
    ci_t *c = mig_of(device);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c) return valid_device(device) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    *id = c->gi_id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    REQUIRE_INIT();
    ci_t *c = mig_of(device);
    if (!id) return NVML_ERROR_INVALID_ARGUMENT;
    if (!c) return valid_device(device) ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    *id = c->id;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device) {
    REQUIRE_INIT();
    ci_t *c = mig_of(migDevice);
    if (!c || !device) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &data.devices[c->device];
    return NVML_SUCCESS;
}
