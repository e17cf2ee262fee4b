/* The NVML-shaped half of two library stand-ins (test suite only): IXML (libixml.so) exports NVML's
 * own entry-point names, HGML (libhgml.so) the same API under an "hgml" prefix, with NVML's
 * signatures, return codes and struct layouts. The including stand-in defines, before including
 * this after "../common/fixture.h":
 *
 *   PFX(name)  the entry-point prefix, e.g.  #define PFX(name) nvml##name
 *   PCI_FN     its PCI-info entry point      (nvmlDeviceGetPciInfo_v3, hgmlDeviceGetPciInfo_v2)
 *   CC_FN      its compute-capability one    (nvmlDeviceGetCudaComputeCapability, ...Hggc...)
 *   RT_FN      its runtime-version one       (nvmlSystemGetCudaDriverVersion, ...Hggc...)
 *   RT_KEY     the fixture key RT_FN serves  ("cuda", "hggc")
 *
 * Fixture keys served: init, count_error, devices, driver, RT_KEY; device.<i>.uuid / uuid_error /
 * name / name_error / bus / memory_bytes / memory_used_bytes / memory_error / minor / cc=<major.minor>
 * / util / temperature / power_mw. XRet, XDevice, dev_index() and the X_* codes are left for the
 * stand-in's own further entry points.
 */
#ifndef GPUSTACK_STUB_NVML_SHAPED_H
#define GPUSTACK_STUB_NVML_SHAPED_H

#if !defined(GPUSTACK_STUB_FIXTURE_H) || !defined(PFX) || !defined(PCI_FN) || !defined(CC_FN) || \
    !defined(RT_FN) || !defined(RT_KEY)
#error "include ../common/fixture.h and define PFX, PCI_FN, CC_FN, RT_FN and RT_KEY first"
#endif

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

#endif /* GPUSTACK_STUB_NVML_SHAPED_H */
