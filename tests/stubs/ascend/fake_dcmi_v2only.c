/* The stand-in built without any V1 symbol: a library whose V1 entry points are missing (not merely
 * refused), which the binding must also treat as the driver refusing V1. Compiled by the tests
 * (tests.stubs.build.compile_stub), not installed into a fixture host. */
#define FAKE_DCMI_NO_V1 1
#include "fake_dcmi.c"
