/* The fixture store every library stand-in of this suite serves its data from (test suite only).
 *
 * The data file is "<this library's own path>.fixture" (found through dladdr), one "key=value" per
 * line, '#' comments. Per-device keys are "device.<index>.<field>". A stand-in calls kv_load() from its
 * init entry point, so a change another process wrote is seen; kv_set_dev() rewrites the file
 * (kv_save()), which is how a mode set persists.
 *
 * Header-only (every function static): each stand-in is one .c file compiled on its own, by
 * tests/stubs/build.py and by tests that build a variant with plain gcc, and `#include
 * "../common/fixture.h"` resolves next to the including file without an -I flag. Include it first:
 * dladdr needs _GNU_SOURCE before any system header.
 */
#ifndef GPUSTACK_STUB_FIXTURE_H
#define GPUSTACK_STUB_FIXTURE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KV_MAX 1024
static char kv_keys[KV_MAX][96];
static char kv_vals[KV_MAX][256];
static int kv_n = 0;
static char kv_path[4096];

static void kv_locate(void) {
    Dl_info info;
    if (kv_path[0] == '\0' && dladdr((void *)kv_locate, &info) && info.dli_fname) {
        snprintf(kv_path, sizeof kv_path, "%.4000s.fixture", info.dli_fname);
    }
}

static __attribute__((unused)) int kv_load(void) {
    char line[512];
    FILE *fh;
    kv_locate();
    kv_n = 0;
    fh = fopen(kv_path, "r");
    if (!fh) return -1;
    while (fgets(line, sizeof line, fh) && kv_n < KV_MAX) {
        char *eq, *end;
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0') continue;
        eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        end = eq + 1;
        snprintf(kv_keys[kv_n], sizeof kv_keys[kv_n], "%.95s", line);
        snprintf(kv_vals[kv_n], sizeof kv_vals[kv_n], "%.255s", end);
        kv_n++;
    }
    fclose(fh);
    return 0;
}

static __attribute__((unused)) const char *kv_get(const char *key) {
    int i;
    for (i = 0; i < kv_n; i++) {
        if (strcmp(kv_keys[i], key) == 0) return kv_vals[i];
    }
    return NULL;
}

static __attribute__((unused)) long kv_int(const char *key, long dflt) {
    const char *v = kv_get(key);
    return v ? strtol(v, NULL, 0) : dflt;
}

static __attribute__((unused)) const char *kv_dev(int dev, const char *field) {
    char key[96];
    snprintf(key, sizeof key, "device.%d.%.60s", dev, field);
    return kv_get(key);
}

static __attribute__((unused)) long kv_dev_int(int dev, const char *field, long dflt) {
    const char *v = kv_dev(dev, field);
    return v ? strtol(v, NULL, 0) : dflt;
}

/* Write the store back in the file's own layout: every line as it was (comments, blank lines, order)
 * with each key's value replaced by the current one, keys removed from the store dropped and keys the
 * file did not have appended -- so a
 * state change put back leaves the fixture byte for byte as it was (a tracked fixture stays clean). */
static __attribute__((unused)) int kv_save(void) {
    FILE *in, *fh;
    char tmp[4200], line[512];
    int i, seen[KV_MAX];
    kv_locate();
    memset(seen, 0, sizeof seen);
    snprintf(tmp, sizeof tmp, "%s.tmp", kv_path);
    fh = fopen(tmp, "w");
    if (!fh) return -1;
    in = fopen(kv_path, "r");
    while (in && fgets(line, sizeof line, in)) {
        char *eq = strchr(line, '=');
        int done = 0;
        if (line[0] != '#' && eq) {
            size_t klen = (size_t)(eq - line);
            for (i = 0; i < kv_n; i++) {
                if (strlen(kv_keys[i]) == klen && strncmp(kv_keys[i], line, klen) == 0) {
                    fprintf(fh, "%s=%s\n", kv_keys[i], kv_vals[i]);
                    seen[i] = done = 1;
                    break;
                }
            }
        }
        /* a comment or blank line is kept; a key the store no longer has (removed) is dropped */
        if (!done && (line[0] == '#' || !eq)) fputs(line, fh);
    }
    if (in) fclose(in);
    for (i = 0; i < kv_n; i++)
        if (!seen[i]) fprintf(fh, "%s=%s\n", kv_keys[i], kv_vals[i]);
    fclose(fh);
    return rename(tmp, kv_path);
}

static __attribute__((unused)) int kv_set_dev(int dev, const char *field, const char *value) {
    char key[96];
    int i;
    snprintf(key, sizeof key, "device.%d.%.60s", dev, field);
    for (i = 0; i < kv_n; i++) {
        if (strcmp(kv_keys[i], key) == 0) {
            snprintf(kv_vals[i], sizeof kv_vals[i], "%.255s", value);
            return kv_save();
        }
    }
    if (kv_n >= KV_MAX) return -1;
    snprintf(kv_keys[kv_n], sizeof kv_keys[kv_n], "%.95s", key);
    snprintf(kv_vals[kv_n], sizeof kv_vals[kv_n], "%.255s", value);
    kv_n++;
    return kv_save();
}

/* "0000:1a:00.0" -> domain/bus/device/function; 0 on success */
static __attribute__((unused)) int kv_bdf(const char *bdf, unsigned *dom, unsigned *bus, unsigned *dev,
                                          unsigned *fn) {
    if (!bdf) return -1;
    return sscanf(bdf, "%x:%x:%x.%x", dom, bus, dev, fn) == 4 ? 0 : -1;
}

#endif /* GPUSTACK_STUB_FIXTURE_H */
