/* Stand-in for MetaX's libmxsml.so (MXSML), for the test suite only.
 *
 * Exports the real MXSML symbol names with the signatures and struct layouts of MetaX's MxSml.h as
 * mirrored by MetaX's own pymxsml ctypes binding and the gpustack/gpustack-operator binding/mxsml
 * (mxSmlGetDeviceCount returns the count itself; memory in KiB; temperature in hundredths of a
 * degree; board power per "way" in mW). Data from "<this library>.fixture":
 *
 *   init=<mxSmlReturn_t of mxSmlInit>   devices=<n>   driver=<x.y.z>   maca=<MACA version>
 *   device.<i>.uuid / name / bus / memory_kib / memory_used_kib / util / temperature
 *   device.<i>.power_mw=<way0>,<way1>,...   device.<i>.mode=0|1|2 (bare metal / PF / VF)
 *   device.<i>.info_error=<mxSmlReturn_t>   device.<i>.memory_error=<mxSmlReturn_t>
 */
#include "../common/fixture.h" /* the fixture store; first, as it defines _GNU_SOURCE */

typedef unsigned int mxSmlReturn_t;
#define MXSML_Success 0
#define MXSML_Failure 1
#define MXSML_NoDevice 2
#define MXSML_InvalidDeviceId 6
#define MXSML_InvalidInput 9
#define MXSML_InsufficientSize 10

typedef struct {
    unsigned int deviceId;
    unsigned int type;
    char bdfId[32];
    unsigned int gpuId;
    unsigned int nodeId;
    char uuid[96];
    unsigned int brand;
    unsigned int mode;
    char deviceName[32];
} mxSmlDeviceInfo_t;

typedef struct { long visVramTotal, visVramUse, vramTotal, vramUse, xttTotal, xttUse; } mxSmlMemoryInfo_t;
typedef struct { unsigned int voltage, current, power; } mxSmlBoardWayElectricInfo_t;

static int initialized = 0;

static int check_device(unsigned int device) {
    if (!initialized) return MXSML_Failure;
    if (device >= (unsigned int)kv_int("devices", 0)) return MXSML_InvalidDeviceId;
    return MXSML_Success;
}

static mxSmlReturn_t copy_version(const char *value, char *out, unsigned int *size) {
    size_t len;
    if (!value) return MXSML_Failure;
    if (!out || !size) return MXSML_InvalidInput;
    len = strlen(value);
    if (*size < len + 1) {
        *size = (unsigned int)(len + 1);
        return MXSML_InsufficientSize;
    }
    memcpy(out, value, len + 1);
    *size = (unsigned int)len;
    return MXSML_Success;
}

mxSmlReturn_t mxSmlInit(void) {
    mxSmlReturn_t rc;
    if (kv_load() != 0) return MXSML_Failure;
    rc = (mxSmlReturn_t)kv_int("init", 0);
    initialized = rc == MXSML_Success;
    return rc;
}

unsigned int mxSmlGetDeviceCount(void) { return initialized ? (unsigned int)kv_int("devices", 0) : 0; }

const char *mxSmlGetErrorString(mxSmlReturn_t code) {
    switch (code) {
    case 0: return "Success";
    case 1: return "Failure";
    case 2: return "NoDevice";
    case 3: return "OperationNotSupport";
    case 6: return "InvalidDeviceId";
    case 8: return "PermissionDenied";
    case 10: return "InsufficientSize";
    default: return "Unknown";
    }
}

mxSmlReturn_t mxSmlGetDeviceInfo(unsigned int deviceId, mxSmlDeviceInfo_t *info) {
    const char *v;
    mxSmlReturn_t rc = (mxSmlReturn_t)check_device(deviceId);
    if (rc) return rc;
    if (!info) return MXSML_InvalidInput;
    rc = (mxSmlReturn_t)kv_dev_int((int)deviceId, "info_error", 0);
    if (rc) return rc;
    memset(info, 0, sizeof *info);
    info->deviceId = deviceId;
    info->gpuId = deviceId;
    info->brand = 2; /* MXSML_Brand_C */
    info->mode = (unsigned int)kv_dev_int((int)deviceId, "mode", 0);
    if ((v = kv_dev((int)deviceId, "bus"))) strncpy(info->bdfId, v, sizeof info->bdfId - 1);
    if ((v = kv_dev((int)deviceId, "uuid"))) strncpy(info->uuid, v, sizeof info->uuid - 1);
    if ((v = kv_dev((int)deviceId, "name"))) strncpy(info->deviceName, v, sizeof info->deviceName - 1);
    return MXSML_Success;
}

mxSmlReturn_t mxSmlGetMemoryInfo(unsigned int deviceId, mxSmlMemoryInfo_t *memory) {
    mxSmlReturn_t rc = (mxSmlReturn_t)check_device(deviceId);
    if (rc) return rc;
    if (!memory) return MXSML_InvalidInput;
    rc = (mxSmlReturn_t)kv_dev_int((int)deviceId, "memory_error", 0);
    if (rc) return rc;
    memset(memory, 0, sizeof *memory);
    memory->vramTotal = kv_dev_int((int)deviceId, "memory_kib", 0);
    memory->vramUse = kv_dev_int((int)deviceId, "memory_used_kib", 0);
    memory->visVramTotal = memory->vramTotal;
    memory->visVramUse = memory->vramUse;
    return MXSML_Success;
}

/* mxSmlVersionUnit_t: MXSML_VERSION_BIOS = 0, MXSML_VERSION_DRIVER = 1, ... */
mxSmlReturn_t mxSmlGetDeviceVersion(unsigned int deviceId, unsigned int unit, char *version, unsigned int *size) {
    mxSmlReturn_t rc = (mxSmlReturn_t)check_device(deviceId);
    if (rc) return rc;
    return copy_version(unit == 1 ? kv_get("driver") : "1.8.6", version, size);
}

mxSmlReturn_t mxSmlGetMacaVersion(char *version, unsigned int *size) {
    if (!initialized) return MXSML_Failure;
    return copy_version(kv_get("maca"), version, size);
}

/* sensor MXSML_TEMPERATURE_HOTSPOT = 0; unit: 0.01 degree Celsius */
mxSmlReturn_t mxSmlGetTemperatureInfo(unsigned int deviceId, unsigned int sensor, int *temp) {
    mxSmlReturn_t rc = (mxSmlReturn_t)check_device(deviceId);
    if (rc) return rc;
    if (!temp) return MXSML_InvalidInput;
    *temp = sensor == 0 ? (int)kv_dev_int((int)deviceId, "temperature", 0) : 10500;
    return MXSML_Success;
}

/* ip MXSML_USAGE_XCORE = 4 */
mxSmlReturn_t mxSmlGetDeviceIpUsage(unsigned int deviceId, unsigned int ip, int *usage) {
    mxSmlReturn_t rc = (mxSmlReturn_t)check_device(deviceId);
    if (rc) return rc;
    if (!usage) return MXSML_InvalidInput;
    *usage = ip == 4 ? (int)kv_dev_int((int)deviceId, "util", 0) : 0;
    return MXSML_Success;
}

mxSmlReturn_t mxSmlGetBoardPowerInfo(unsigned int deviceId, unsigned int *infoSize, mxSmlBoardWayElectricInfo_t *info) {
    unsigned int ways[8], n = 0;
    const char *v;
    char buf[256], *tok, *save = NULL;
    mxSmlReturn_t rc = (mxSmlReturn_t)check_device(deviceId);
    if (rc) return rc;
    if (!infoSize) return MXSML_InvalidInput;
    v = kv_dev((int)deviceId, "power_mw");
    if (v) {
        snprintf(buf, sizeof buf, "%.255s", v);
        for (tok = strtok_r(buf, ",", &save); tok && n < 8; tok = strtok_r(NULL, ",", &save)) {
            ways[n++] = (unsigned int)strtoul(tok, NULL, 0);
        }
    }
    if (!info || *infoSize < n) {
        *infoSize = n;
        return MXSML_InsufficientSize;
    }
    for (*infoSize = 0; *infoSize < n; (*infoSize)++) {
        info[*infoSize].voltage = 12000;
        info[*infoSize].power = ways[*infoSize];
        info[*infoSize].current = ways[*infoSize] / 12;
    }
    return MXSML_Success;
}
