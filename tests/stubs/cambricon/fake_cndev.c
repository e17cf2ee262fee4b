/* Stand-in for Cambricon's libcndev.so (CNDev), for the test suite only.
 *
 * Exports the real CNDev symbol names with the C signatures and struct layouts of cndev.h (as
 * vendored in gpustack/gpustack-operator binding/cndev/cndev.h and Cambricon's own
 * cambricon-k8s-device-plugin headers/mocks), serving the data in "<this library>.fixture":
 *
 *   init=<cndevRet_t of cndevInit>            count_error=<cndevRet_t of cndevGetDeviceCount>
 *   devices=<n>                                driver=<major.minor.build>
 *   device.<i>.uuid=<36-char uuid>             device.<i>.uuid_error=<cndevRet_t>
 *   device.<i>.name=<card name>                device.<i>.name_error=1 (name string "Unknown")
 *   device.<i>.bus=<dddd:bb:dd.f>              device.<i>.memory_mib / memory_used_mib
 *   device.<i>.util / temperature / power      device.<i>.smlu=0|1
 *   device.<i>.smlu_get_error / smlu_set_error=<cndevRet_t>
 *
 *   device.<i>.profiles / profile.<id> / smlu.<id> / profile_create_error / instance_create_error
 *   (the sMLU profile and instance calls, documented at their definitions below)
 *
 * Built with -DFAKE_CNDEV_NO_SMLU it lacks every sMLU entry point, as an older library does.
 */
#include "../common/fixture.h" /* the fixture store; first, as it defines _GNU_SOURCE */
#include <stdint.h>

typedef int cndevRet_t;
typedef int32_t cndevDevice_t;

#define CNDEV_SUCCESS 0
#define CNDEV_ERROR_UNSUPPORTED_API_VERSION 3
#define CNDEV_ERROR_UNINITIALIZED 4
#define CNDEV_ERROR_INVALID_ARGUMENT 5
#define CNDEV_ERROR_INVALID_DEVICE_ID 6
#define CNDEV_ERROR_UNKNOWN 7

typedef struct { int32_t version; uint32_t number; } cndevCardInfo_t;
typedef struct { int32_t version; uint8_t uuid[37]; uint64_t ncsUUID64; } cndevUUID_t;
typedef struct {
    int64_t physicalMemoryTotal, physicalMemoryUsed, reservedMemory, virtualMemoryTotal, virtualMemoryUsed;
    uint64_t globalMemory;
    uint64_t reserved[16];
} cndevMemoryInfoV2_t;
typedef struct {
    int32_t version;
    uint32_t mcuMajorVersion, mcuMinorVersion, mcuBuildVersion;
    uint32_t driverMajorVersion, driverMinorVersion, driverBuildVersion;
} cndevVersionInfo_t;
typedef struct {
    uint32_t subsystemId, deviceId;
    uint16_t vendor, subsystemVendor;
    uint32_t domain, bus, device, function;
    uint16_t moduleId, slotId;
    uint32_t reserved[8];
} cndevPCIeInfoV2_t;
typedef struct { int32_t usage, cap, machine, tdp, maxPower, reserved[16]; } cndevDevicePowerInfo_t;
typedef struct {
    int32_t version, board, cluster[20], memoryDie[8], chip, airInlet, airOutlet, memory, videoInput, cpu, isp;
} cndevTemperatureInfo_t;
typedef struct { int32_t version, averageCoreUtilization, coreUtilization[80]; } cndevUtilizationInfo_t;
typedef struct { int32_t version; int32_t smluMode; } cndevSMLUMode_t;

static int initialized = 0;

static int bad_version(int32_t version) { return version < 1 || version > 6; }

static int check_device(cndevDevice_t device) {
    if (!initialized) return CNDEV_ERROR_UNINITIALIZED;
    if (device < 0 || device >= kv_int("devices", 0)) return CNDEV_ERROR_INVALID_DEVICE_ID;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevInit(int reserved) {
    int rc;
    (void)reserved;
    if (kv_load() != 0) return CNDEV_ERROR_UNKNOWN;
    rc = (int)kv_int("init", 0);
    initialized = rc == CNDEV_SUCCESS;
    return rc;
}

cndevRet_t cndevRelease(void) {
    initialized = 0;
    return CNDEV_SUCCESS;
}

const char *cndevGetErrorString(cndevRet_t code) {
    switch (code) {
    case 0: return "CNDEV_SUCCESS";
    case 1: return "CNDEV_ERROR_NO_DRIVER";
    case 3: return "CNDEV_ERROR_UNSUPPORTED_API_VERSION";
    case 4: return "CNDEV_ERROR_UNINITIALIZED";
    case 6: return "CNDEV_ERROR_INVALID_DEVICE_ID";
    case 7: return "CNDEV_ERROR_UNKNOWN";
    case 10: return "CNDEV_ERROR_NOT_SUPPORTED";
    case 12: return "CNDEV_ERROR_NO_DEVICES";
    case 13: return "CNDEV_ERROR_NO_PERMISSION";
    case 15: return "CNDEV_ERROR_IN_USE";
    default: return "CNDEV_ERROR_UNKNOWN";
    }
}

cndevRet_t cndevGetDeviceCount(cndevCardInfo_t *cardNum) {
    int rc;
    if (!initialized) return CNDEV_ERROR_UNINITIALIZED;
    if (!cardNum) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(cardNum->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    rc = (int)kv_int("count_error", 0);
    if (rc) return rc;
    cardNum->number = (uint32_t)kv_int("devices", 0);
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetDeviceHandleByIndex(int index, cndevDevice_t *handle) {
    int rc = check_device(index);
    if (rc) return rc;
    if (!handle) return CNDEV_ERROR_INVALID_ARGUMENT;
    *handle = index;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetUUID(cndevUUID_t *uuidInfo, cndevDevice_t device) {
    int rc = check_device(device);
    const char *uuid;
    if (rc) return rc;
    if (!uuidInfo) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(uuidInfo->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    rc = (int)kv_dev_int(device, "uuid_error", 0);
    if (rc) return rc;
    uuid = kv_dev(device, "uuid");
    if (!uuid) return CNDEV_ERROR_UNKNOWN;
    memset(uuidInfo->uuid, 0, sizeof uuidInfo->uuid);
    strncpy((char *)uuidInfo->uuid, uuid, sizeof uuidInfo->uuid - 1);
    uuidInfo->ncsUUID64 = 0;
    return CNDEV_SUCCESS;
}

const char *cndevGetCardNameStringByDevId(cndevDevice_t device) {
    const char *name;
    if (check_device(device) || kv_dev_int(device, "name_error", 0)) return "Unknown";
    name = kv_dev(device, "name");
    return name ? name : "Unknown";
}

cndevRet_t cndevGetMemoryUsageV2(cndevMemoryInfoV2_t *memInfo, cndevDevice_t device) {
    int rc = check_device(device);
    if (rc) return rc;
    if (!memInfo) return CNDEV_ERROR_INVALID_ARGUMENT;
    rc = (int)kv_dev_int(device, "memory_error", 0);
    if (rc) return rc;
    memset(memInfo, 0, sizeof *memInfo);
    memInfo->physicalMemoryTotal = kv_dev_int(device, "memory_mib", 0);
    memInfo->physicalMemoryUsed = kv_dev_int(device, "memory_used_mib", 0);
    memInfo->virtualMemoryTotal = memInfo->physicalMemoryTotal;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetPCIeInfoV2(cndevPCIeInfoV2_t *info, cndevDevice_t device) {
    unsigned dom, bus, dev, fn;
    int rc = check_device(device);
    if (rc) return rc;
    if (!info) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (kv_bdf(kv_dev(device, "bus"), &dom, &bus, &dev, &fn)) return CNDEV_ERROR_UNKNOWN;
    memset(info, 0, sizeof *info);
    info->vendor = 0xcabc;
    info->deviceId = (uint32_t)kv_dev_int(device, "pci_device", 0);
    info->domain = dom;
    info->bus = bus;
    info->device = dev;
    info->function = fn;
    info->slotId = 0xffff;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetVersionInfo(cndevVersionInfo_t *versInfo, cndevDevice_t device) {
    unsigned major = 0, minor = 0, build = 0;
    const char *driver = kv_get("driver");
    int rc = check_device(device);
    if (rc) return rc;
    if (!versInfo) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(versInfo->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    if (!driver || sscanf(driver, "%u.%u.%u", &major, &minor, &build) < 2) return CNDEV_ERROR_UNKNOWN;
    versInfo->mcuMajorVersion = 1;
    versInfo->mcuMinorVersion = 1;
    versInfo->mcuBuildVersion = 6;
    versInfo->driverMajorVersion = major;
    versInfo->driverMinorVersion = minor;
    versInfo->driverBuildVersion = build;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetDevicePowerInfo(cndevDevicePowerInfo_t *powerInfo, cndevDevice_t device) {
    int rc = check_device(device);
    if (rc) return rc;
    if (!powerInfo) return CNDEV_ERROR_INVALID_ARGUMENT;
    memset(powerInfo, 0, sizeof *powerInfo);
    powerInfo->usage = (int32_t)kv_dev_int(device, "power", 0);
    powerInfo->cap = 250;
    powerInfo->tdp = 250;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetTemperatureInfo(cndevTemperatureInfo_t *tempInfo, cndevDevice_t device) {
    int rc = check_device(device);
    if (rc) return rc;
    if (!tempInfo) return CNDEV_ERROR_INVALID_ARGUMENT;
    memset(tempInfo, 0, sizeof *tempInfo);
    tempInfo->chip = (int32_t)kv_dev_int(device, "temperature", 0);
    tempInfo->board = tempInfo->chip - 4;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetDeviceUtilizationInfo(cndevUtilizationInfo_t *utilInfo, cndevDevice_t device) {
    int rc = check_device(device);
    if (rc) return rc;
    if (!utilInfo) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(utilInfo->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    utilInfo->averageCoreUtilization = (int32_t)kv_dev_int(device, "util", 0);
    return CNDEV_SUCCESS;
}

#ifndef FAKE_CNDEV_NO_SMLU
cndevRet_t cndevGetSMLUMode(cndevSMLUMode_t *mode, cndevDevice_t device) {
    int rc = check_device(device);
    if (rc) return rc;
    if (!mode) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(mode->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    rc = (int)kv_dev_int(device, "smlu_get_error", 0);
    if (rc) return rc;
    mode->smluMode = kv_dev_int(device, "smlu", 0) ? 1 : 0;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevSetSMLUMode(cndevSMLUMode_t *mode, cndevDevice_t device) {
    int rc = check_device(device);
    if (rc) return rc;
    if (!mode) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(mode->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    rc = (int)kv_dev_int(device, "smlu_set_error", 0);
    if (rc) return rc;
    if (kv_set_dev(device, "smlu", mode->smluMode ? "1" : "0") != 0) return CNDEV_ERROR_UNKNOWN;
    return CNDEV_SUCCESS;
}
/* -- sMLU profiles and instances (cndev.h names; state in the fixture file) ------------------------
 *   device.<i>.profiles=<n>                     device.<i>.profile.<id>=<quota>:<memory bytes>:<total>:<remain>
 *   device.<i>.smlu.<id>=<profile id>:<name>    a live instance (id from 1; "" once destroyed)
 *   device.<i>.profile_create_error / instance_create_error=<cndevRet_t>
 * An instance's node is /dev/cambricon-caps/cap_dev<i>_mi<id>; its handle is id << 8 | i. */
typedef struct { int32_t version; uint32_t mluQuota; uint64_t memorySize; } cndevSMluSet_t;
typedef struct { int32_t version; int32_t count; int32_t profileId[128]; } cndevSMluProfileIdInfo_t;
typedef struct {
    int32_t version, profileId;
    char name[100];
    uint32_t totalCapacity, remainCapacity, mluQuota[2];
    uint64_t memorySize[2];
} cndevSMluProfileInfo_t;
typedef struct {
    int32_t version, profileId, instanceId;
    uint8_t uuid[37];
    int32_t domain, bus, device, function;
    char profileName[100], instanceName[100], devNodeName[100];
    uint32_t mluQuota[2];
    uint64_t memorySize[2];
    uint32_t reserved[128];
} cndevSMluInfo_t;

static int profile_fields(int dev, int id, unsigned *quota, unsigned long long *mem, unsigned *total, unsigned *remain) {
    char field[48];
    const char *v;
    snprintf(field, sizeof field, "profile.%d", id);
    v = kv_dev(dev, field);
    if (!v || sscanf(v, "%u:%llu:%u:%u", quota, mem, total, remain) != 4) return -1;
    return 0;
}

cndevRet_t cndevGetSMluProfileIdInfo(cndevSMluProfileIdInfo_t *ids, cndevDevice_t device) {
    int rc = check_device(device), k, n;
    if (rc) return rc;
    if (!ids) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(ids->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    n = (int)kv_dev_int(device, "profiles", 0);
    ids->count = 0;
    for (k = 0; k < n && k < 128; k++) ids->profileId[ids->count++] = k;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetSMluProfileInfo(cndevSMluProfileInfo_t *info, int profile, cndevDevice_t device) {
    unsigned quota, total, remain;
    unsigned long long mem;
    int rc = check_device(device);
    if (rc) return rc;
    if (!info) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(info->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    if (profile_fields(device, profile, &quota, &mem, &total, &remain)) return 14; /* NOT_FOUND */
    memset(&info->profileId, 0, sizeof *info - sizeof info->version);
    info->profileId = profile;
    snprintf(info->name, sizeof info->name, "%u.%llugb", quota, mem >> 30);
    info->totalCapacity = total;
    info->remainCapacity = remain;
    info->mluQuota[0] = quota;
    info->memorySize[0] = mem;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevCreateSMluProfileInfo(cndevSMluSet_t *spec, int *profileId, cndevDevice_t device) {
    char field[48], value[96], count[16];
    int rc = check_device(device), n;
    if (rc) return rc;
    if (!spec || !profileId) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(spec->version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    rc = (int)kv_dev_int(device, "profile_create_error", 0);
    if (rc) return rc;
    if (!kv_dev_int(device, "smlu", 0)) return 10; /* NOT_SUPPORTED outside sMLU mode */
    n = (int)kv_dev_int(device, "profiles", 0);
    snprintf(field, sizeof field, "profile.%d", n);
    snprintf(value, sizeof value, "%u:%llu:16:16", spec->mluQuota, (unsigned long long)spec->memorySize);
    snprintf(count, sizeof count, "%d", n + 1);
    if (kv_set_dev(device, field, value) || kv_set_dev(device, "profiles", count)) return CNDEV_ERROR_UNKNOWN;
    *profileId = n;
    return CNDEV_SUCCESS;
}

static const char *smlu_state(int dev, int id) {
    char field[48];
    snprintf(field, sizeof field, "smlu.%d", id);
    return kv_dev(dev, field);
}

cndevRet_t cndevCreateSMluInstanceByProfileId(int32_t *miHandle, unsigned int profileId, cndevDevice_t device,
                                              char *instanceName) {
    unsigned quota, total, remain;
    unsigned long long mem;
    char field[48], value[160];
    int rc = check_device(device), id, k;
    if (rc) return rc;
    if (!miHandle) return CNDEV_ERROR_INVALID_ARGUMENT;
    rc = (int)kv_dev_int(device, "instance_create_error", 0);
    if (rc) return rc;
    if (profile_fields(device, (int)profileId, &quota, &mem, &total, &remain)) return 14;
    if (remain == 0) return 9; /* INSUFFICIENT_SPACE */
    for (k = 1; k < 128; k++) {
        const char *v = smlu_state(device, k), *colon;
        if (v && v[0] && instanceName && instanceName[0] && (colon = strchr(v, ':')) && !strcmp(colon + 1, instanceName))
            return 16; /* DUPLICATE */
    }
    for (id = 1; id < 128; id++) {
        const char *v = smlu_state(device, id);
        if (!v || !v[0]) break;
    }
    snprintf(field, sizeof field, "smlu.%d", id);
    snprintf(value, sizeof value, "%u:%.100s", profileId, instanceName ? instanceName : "");
    if (kv_set_dev(device, field, value)) return CNDEV_ERROR_UNKNOWN;
    snprintf(field, sizeof field, "profile.%u", profileId);
    snprintf(value, sizeof value, "%u:%llu:%u:%u", quota, mem, total, remain - 1);
    if (kv_set_dev(device, field, value)) return CNDEV_ERROR_UNKNOWN;
    *miHandle = (id << 8) | device;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevGetAllSMluInstanceInfo(int *count, cndevSMluInfo_t *infos, cndevDevice_t device) {
    int rc = check_device(device), id, n = 0;
    if (rc) return rc;
    if (!count || !infos) return CNDEV_ERROR_INVALID_ARGUMENT;
    if (bad_version(infos[0].version)) return CNDEV_ERROR_UNSUPPORTED_API_VERSION;
    for (id = 1; id < 128; id++) {
        const char *v = smlu_state(device, id), *colon;
        unsigned profile;
        if (!v || !v[0] || sscanf(v, "%u", &profile) != 1) continue;
        if (n >= *count) return 9;
        colon = strchr(v, ':');
        memset(&infos[n], 0, sizeof infos[n]);
        infos[n].version = 6;
        infos[n].profileId = (int32_t)profile;
        infos[n].instanceId = id;
        snprintf((char *)infos[n].uuid, sizeof infos[n].uuid, "smlu-%d-%d", device, id);
        snprintf(infos[n].instanceName, sizeof infos[n].instanceName, "%.99s", colon ? colon + 1 : "");
        snprintf(infos[n].devNodeName, sizeof infos[n].devNodeName, "/dev/cambricon-caps/cap_dev%d_mi%d", device, id);
        n++;
    }
    *count = n;
    return CNDEV_SUCCESS;
}

cndevRet_t cndevDestroySMluInstanceByHandle(int32_t miHandle) {
    char field[48];
    int device = miHandle & 0xff, id = miHandle >> 8;
    int rc = check_device(device);
    const char *v;
    if (rc) return rc;
    v = smlu_state(device, id);
    if (!v || !v[0]) return 14;
    snprintf(field, sizeof field, "smlu.%d", id);
    return kv_set_dev(device, field, "") ? CNDEV_ERROR_UNKNOWN : CNDEV_SUCCESS;
}
#endif
