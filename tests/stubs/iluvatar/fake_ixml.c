/* Stand-in for Iluvatar's libixml.so (IXML), for the test suite only.
 *
 * IXML is NVML-compatible: libixml.so exports NVML-named entry points (nvmlInit_v2,
 * nvmlDeviceGetCount_v2, nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetPciInfo_v3, ...) with NVML's
 * signatures and struct layouts (gpustack/gpustack-operator binding/ixml). This stand-in exports
 * those names, serving "<this library>.fixture":
 *
 *   init=<nvmlReturn_t of nvmlInit_v2>   count_error=<nvmlReturn_t>   devices=<n>
 *   driver=<driver version string>       cuda=<cudaDriverVersion integer, e.g. 10020>
 *   device.<i>.uuid / name / bus / minor / memory_bytes / memory_used_bytes / cc=<major.minor>
 *   device.<i>.util / temperature / power_mw   device.<i>.uuid_error / name_error / memory_error
 */
#include "../common/fixture.h" /* the fixture store; first, as it defines _GNU_SOURCE */

#define PFX(name) nvml##name
#define PCI_FN nvmlDeviceGetPciInfo_v3
#define CC_FN nvmlDeviceGetCudaComputeCapability
#define RT_FN nvmlSystemGetCudaDriverVersion
#define RT_KEY "cuda"
#include "../common/nvml_shaped.h"
