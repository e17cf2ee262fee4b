/* libprobe-standin.so: the shared library the preflight probe tests preload into a container
 * (tests/tools/container_host.py builds it with gcc and caches it under tests/.build/docker/).
 *
 * A test copies it to the vendor library's name (e.g. libvgpu.so) under the host root, mounts the
 * directory into the container and lists the copy in /etc/ld.so.preload: the dynamic loader then maps
 * it into every process, so /proc/self/maps of `cat` names it. It does nothing else -- it is not a
 * vendor library and enforces no quota (the probe image's reader scripts fake those). */
__attribute__((constructor)) static void probe_standin_loaded(void) {}
