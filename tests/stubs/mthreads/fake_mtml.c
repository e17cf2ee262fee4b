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
#include "../common/fixture.h" /* the fixture store; first, as it defines _GNU_SOURCE */

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
