/* The stand-in built without the container-share entry points (dcmi_get/set_device_share_enable):
 * a V1 driver whose libdcmi predates them. Compiled by the tests, not installed into a host. */
#define FAKE_DCMI_NO_SHARE 1
#include "fake_dcmi.c"
