/*
 * Stand-in for Huawei's libdcmi.so: both DCMI API generations, serving fixture data.
 *
 * Exports the V1 entry points (dcmi_*(card_id, device_id, ...)) and the V2 ones (dcmiv2_*(dev_id,
 * ...)) with the C signatures and struct layouts of the vendor header dcmi_interface_api.h (the
 * ones operator/src/gpustack_operator/manufacturers/ascend/dcmi.py binds). The data lives in
 * "<this library's path>.fixture" (found through dladdr), re-read on every call:
 *
 *   api=v1|v2                  which generation this driver serves; the other one answers
 *                              DCMI_ERR_CODE_NOT_SUPPORT (-8255) to every call, as a V2 driver
 *                              answers the V1 symbols it still exports
 *   init_rc=N                  what the served generation's init answers (failure injection)
 *   v1_init_rc=N               v2 hosts: what dcmi_init answers (default -8255; 0 = init accepted,
 *                              the refusal then comes at the first enumeration)
 *   card_list_rc=N             the card list (V1) / device list (V2) fails
 *   driver_version=S  driver_version_rc=N  dcmi_version=S
 *   share_get_rc=N  share_set_rc=N   container-share read / write failure, every device
 *   mainboard_id=N  super_pod_type=N   V2: the A5 product-type reads (mainboard_rc=, spod_rc= fail them)
 *   npu key=value ...          one device per line:
 *     card= dev=               V1 address (card id, device in card); dev_id= on V2 (card=dev_id, dev=0)
 *     logic= phy= type=        logic id, physical id, unit type (0 NPU, 1 MCU)
 *     chip_type= chip_name= chip_ver= aicore=
 *     die=w0,w1,w2,w3,w4       the identity die, five hex words (VDIE on V1, DDIE on V2)
 *     bus=dddd:bb:dd.f  pci_vendor= pci_device= sub_vendor= sub_device= (hex)
 *     hbm_mb= hbm_used_mb= hbm_temp=       HBM (MB)
 *     ddr_mb= ddr_avail_mb= ddr_util=      the detailed memory info (devices without HBM)
 *     util_aicore= temp= power=            power in 0.1 W
 *     share=0|1                            the container-share flag (a set rewrites this token)
 *     die_rc= chip_rc= hbm_rc= phy_rc= pcie_rc= share_get_rc= share_set_rc= util_rc= temp_rc=
 *     power_rc=                            per-device failure injection
 *
 * Calls before the served generation's init succeeded answer DCMI_ERR_CODE_NOT_REDAY.
 * Built variants: -DFAKE_DCMI_NO_V1 exports no V1 symbol at all; -DFAKE_DCMI_NO_SHARE exports no
 * container-share entry point (see fake_dcmi_v2only.c, fake_dcmi_noshare.c).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UNUSED __attribute__((unused))

#define DCMI_OK 0
#define DCMI_ERR_CODE_INVALID_PARAMETER (-8001)
#define DCMI_ERR_CODE_INNER_ERR (-8005)
#define DCMI_ERR_CODE_INVALID_DEVICE_ID (-8007)
#define DCMI_ERR_CODE_NOT_REDAY (-8012)
#define DCMI_ERR_CODE_FILE_OPERATE_FAIL (-8014)
#define DCMI_ERR_CODE_NOT_SUPPORT (-8255)

#define MAX_CHIP_NAME_LEN 32
#define DIE_ID_COUNT 5
#define MAX_NPUS 64
#define LINE_LEN 2048
#define NO_RC 1 /* "not set" marker for per-device rc overrides (DCMI codes are <= 0) */

enum dcmi_die_type { NDIE, VDIE, DDIE, INVALID_DIE };
enum dcmi_unit_type { NPU_TYPE = 0, MCU_TYPE = 1, CPU_TYPE = 2, INVALID_TYPE = 0xFF };

struct dcmi_chip_info {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
};

struct dcmi_chip_info_v2 {
    unsigned char chip_type[MAX_CHIP_NAME_LEN];
    unsigned char chip_name[MAX_CHIP_NAME_LEN];
    unsigned char chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore_cnt;
    unsigned char npu_name[MAX_CHIP_NAME_LEN];
};

struct dcmi_die_id {
    unsigned int soc_die[DIE_ID_COUNT];
};

struct dcmi_hbm_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned long long memory_usage;
    int temp;
    unsigned int bandwith_util_rate;
};

struct dcmi_memory_info {
    unsigned long long memory_size;
    unsigned int freq;
    unsigned int utiliza;
};

struct dcmi_get_memory_info_stru {
    unsigned long long memory_size;
    unsigned long long memory_available;
    unsigned int freq;
    unsigned long hugepagesize;
    unsigned long hugepages_total;
    unsigned long hugepages_free;
    unsigned int utiliza;
    unsigned char reserve[60];
};

struct dcmi_pcie_info {
    unsigned int deviceid;
    unsigned int venderid;
    unsigned int subvenderid;
    unsigned int subdeviceid;
    unsigned int bdf_deviceid;
    unsigned int bdf_busid;
    unsigned int bdf_funcid;
};

struct dcmi_pcie_info_all {
    unsigned int venderid;
    unsigned int subvenderid;
    unsigned int deviceid;
    unsigned int subdeviceid;
    int domain;
    unsigned int bdf_busid;
    unsigned int bdf_deviceid;
    unsigned int bdf_funcid;
    unsigned char reserve[32];
};

struct dcmi_spod_info {
    unsigned int sdid;
    unsigned int super_pod_size;
    unsigned int super_pod_id;
    unsigned int server_index;
    unsigned int chassis_id;
    unsigned int super_pod_type;
    unsigned int reserve[6];
};

enum dcmi_main_cmd { DCMI_MAIN_CMD_CHIP_INF = 12 };
#define DCMI_CHIP_INF_SUB_CMD_SPOD_INFO 1

struct npu {
    int card, dev, logic, phy, type;
    char chip_type[MAX_CHIP_NAME_LEN], chip_name[MAX_CHIP_NAME_LEN], chip_ver[MAX_CHIP_NAME_LEN];
    unsigned int aicore;
    unsigned int die[DIE_ID_COUNT];
    int domain;
    unsigned int bus, devno, fn;
    unsigned int pci_vendor, pci_device, sub_vendor, sub_device;
    unsigned long long hbm_mb, hbm_used_mb, ddr_mb, ddr_avail_mb;
    int hbm_temp;
    unsigned int ddr_util, util_aicore;
    int temp, power, share;
    int die_rc, chip_rc, hbm_rc, phy_rc, pcie_rc, share_get_rc, share_set_rc, util_rc, temp_rc, power_rc;
};

static struct {
    int api; /* 1 or 2 */
    int init_rc, v1_init_rc, card_list_rc, driver_version_rc;
    int share_get_rc, share_set_rc;
    unsigned int mainboard_id, super_pod_type;
    int mainboard_rc, spod_rc;
    char driver_version[256], dcmi_version[256];
    struct npu npus[MAX_NPUS];
    int n;
} F;

static UNUSED int v1_ready, v2_ready;

static const char *fixture_path(void) {
    static char path[PATH_MAX];
    Dl_info info;
    if (!dladdr((void *)&fixture_path, &info) || !info.dli_fname) return NULL;
    snprintf(path, sizeof(path), "%s.fixture", info.dli_fname);
    return path;
}

static void copy_name(char *dst, const char *src) {
    snprintf(dst, MAX_CHIP_NAME_LEN, "%s", src);
}

static int parse_int(const char *v) { return (int)strtol(v, NULL, 0); }
static unsigned int parse_hex(const char *v) { return (unsigned int)strtoul(v, NULL, 16); }

static void parse_npu_token(struct npu *n, const char *key, const char *v) {
    if (!strcmp(key, "card")) n->card = parse_int(v);
    else if (!strcmp(key, "dev")) n->dev = parse_int(v);
    else if (!strcmp(key, "dev_id")) { n->card = parse_int(v); n->dev = 0; }
    else if (!strcmp(key, "logic")) n->logic = parse_int(v);
    else if (!strcmp(key, "phy")) n->phy = parse_int(v);
    else if (!strcmp(key, "type")) n->type = parse_int(v);
    else if (!strcmp(key, "chip_type")) copy_name(n->chip_type, v);
    else if (!strcmp(key, "chip_name")) copy_name(n->chip_name, v);
    else if (!strcmp(key, "chip_ver")) copy_name(n->chip_ver, v);
    else if (!strcmp(key, "aicore")) n->aicore = (unsigned int)parse_int(v);
    else if (!strcmp(key, "die")) {
        char buf[128];
        snprintf(buf, sizeof(buf), "%s", v);
        char *save = NULL;
        int i = 0;
        for (char *w = strtok_r(buf, ",", &save); w && i < DIE_ID_COUNT; w = strtok_r(NULL, ",", &save))
            n->die[i++] = parse_hex(w);
    } else if (!strcmp(key, "bus")) {
        unsigned int d = 0, b = 0, dv = 0, f = 0;
        if (sscanf(v, "%x:%x:%x.%x", &d, &b, &dv, &f) == 4) {
            n->domain = (int)d; n->bus = b; n->devno = dv; n->fn = f;
        }
    } else if (!strcmp(key, "pci_vendor")) n->pci_vendor = parse_hex(v);
    else if (!strcmp(key, "pci_device")) n->pci_device = parse_hex(v);
    else if (!strcmp(key, "sub_vendor")) n->sub_vendor = parse_hex(v);
    else if (!strcmp(key, "sub_device")) n->sub_device = parse_hex(v);
    else if (!strcmp(key, "hbm_mb")) n->hbm_mb = strtoull(v, NULL, 0);
    else if (!strcmp(key, "hbm_used_mb")) n->hbm_used_mb = strtoull(v, NULL, 0);
    else if (!strcmp(key, "hbm_temp")) n->hbm_temp = parse_int(v);
    else if (!strcmp(key, "ddr_mb")) n->ddr_mb = strtoull(v, NULL, 0);
    else if (!strcmp(key, "ddr_avail_mb")) n->ddr_avail_mb = strtoull(v, NULL, 0);
    else if (!strcmp(key, "ddr_util")) n->ddr_util = (unsigned int)parse_int(v);
    else if (!strcmp(key, "util_aicore")) n->util_aicore = (unsigned int)parse_int(v);
    else if (!strcmp(key, "temp")) n->temp = parse_int(v);
    else if (!strcmp(key, "power")) n->power = parse_int(v);
    else if (!strcmp(key, "share")) n->share = parse_int(v);
    else if (!strcmp(key, "die_rc")) n->die_rc = parse_int(v);
    else if (!strcmp(key, "chip_rc")) n->chip_rc = parse_int(v);
    else if (!strcmp(key, "hbm_rc")) n->hbm_rc = parse_int(v);
    else if (!strcmp(key, "phy_rc")) n->phy_rc = parse_int(v);
    else if (!strcmp(key, "pcie_rc")) n->pcie_rc = parse_int(v);
    else if (!strcmp(key, "share_get_rc")) n->share_get_rc = parse_int(v);
    else if (!strcmp(key, "share_set_rc")) n->share_set_rc = parse_int(v);
    else if (!strcmp(key, "util_rc")) n->util_rc = parse_int(v);
    else if (!strcmp(key, "temp_rc")) n->temp_rc = parse_int(v);
    else if (!strcmp(key, "power_rc")) n->power_rc = parse_int(v);
}

/* Parse "npu k=v k=v ..." into n (the line is modified). */
static void parse_npu_line(char *line, struct npu *n) {
    memset(n, 0, sizeof(*n));
    n->share_get_rc = NO_RC;
    n->share_set_rc = NO_RC;
    char *save = NULL;
    for (char *tok = strtok_r(line + 4, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = '\0';
        parse_npu_token(n, tok, eq + 1);
    }
}

static int load(void) {
    const char *path = fixture_path();
    FILE *fp = path ? fopen(path, "r") : NULL;
    memset(&F, 0, sizeof(F));
    F.api = 1;
    F.v1_init_rc = DCMI_ERR_CODE_NOT_SUPPORT;
    if (!fp) return -1;
    char line[LINE_LEN];
    while (fgets(line, sizeof(line), fp)) {
        char *s = line;
        while (*s == ' ' || *s == '\t') s++;
        if (*s == '#' || *s == '\n' || *s == '\0') continue;
        if (!strncmp(s, "npu ", 4)) {
            if (F.n < MAX_NPUS) parse_npu_line(s, &F.npus[F.n++]);
            continue;
        }
        s[strcspn(s, "\r\n")] = '\0';
        char *eq = strchr(s, '=');
        if (!eq) continue;
        *eq = '\0';
        const char *v = eq + 1;
        if (!strcmp(s, "api")) F.api = !strcmp(v, "v2") ? 2 : 1;
        else if (!strcmp(s, "init_rc")) F.init_rc = parse_int(v);
        else if (!strcmp(s, "v1_init_rc")) F.v1_init_rc = parse_int(v);
        else if (!strcmp(s, "card_list_rc")) F.card_list_rc = parse_int(v);
        else if (!strcmp(s, "driver_version")) snprintf(F.driver_version, sizeof(F.driver_version), "%s", v);
        else if (!strcmp(s, "driver_version_rc")) F.driver_version_rc = parse_int(v);
        else if (!strcmp(s, "dcmi_version")) snprintf(F.dcmi_version, sizeof(F.dcmi_version), "%s", v);
        else if (!strcmp(s, "share_get_rc")) F.share_get_rc = parse_int(v);
        else if (!strcmp(s, "share_set_rc")) F.share_set_rc = parse_int(v);
        else if (!strcmp(s, "mainboard_id")) F.mainboard_id = (unsigned int)parse_int(v);
        else if (!strcmp(s, "super_pod_type")) F.super_pod_type = (unsigned int)parse_int(v);
        else if (!strcmp(s, "mainboard_rc")) F.mainboard_rc = parse_int(v);
        else if (!strcmp(s, "spod_rc")) F.spod_rc = parse_int(v);
    }
    fclose(fp);
    return 0;
}

static UNUSED struct npu *find(int card, int dev) {
    for (int i = 0; i < F.n; i++)
        if (F.npus[i].card == card && F.npus[i].dev == dev) return &F.npus[i];
    return NULL;
}

static UNUSED int rc_or(int device_rc, int global_rc) {
    return device_rc != NO_RC ? device_rc : global_rc;
}

static UNUSED void fill_name(unsigned char *dst, const char *src) {
    memset(dst, 0, MAX_CHIP_NAME_LEN);
    memcpy(dst, src, strnlen(src, MAX_CHIP_NAME_LEN - 1));
}

static UNUSED void fill_pcie_all(const struct npu *n, struct dcmi_pcie_info_all *p) {
    memset(p, 0, sizeof(*p));
    p->venderid = n->pci_vendor;
    p->subvenderid = n->sub_vendor;
    p->deviceid = n->pci_device;
    p->subdeviceid = n->sub_device;
    p->domain = n->domain;
    p->bdf_busid = n->bus;
    p->bdf_deviceid = n->devno;
    p->bdf_funcid = n->fn;
}

static UNUSED void fill_hbm(const struct npu *n, struct dcmi_hbm_info *h) {
    memset(h, 0, sizeof(*h));
    h->memory_size = n->hbm_mb;
    h->memory_usage = n->hbm_used_mb;
    h->temp = n->hbm_temp;
    h->freq = 1600;
}

static UNUSED int copy_version(const char *src, char *dst, unsigned int len) {
    if (!dst || len == 0) return DCMI_ERR_CODE_INVALID_PARAMETER;
    if (strlen(src) + 1 > len) return DCMI_ERR_CODE_INVALID_PARAMETER;
    memcpy(dst, src, strlen(src) + 1);
    return DCMI_OK;
}

/* Rewrite the share= token of the npu line addressed by (card, dev) in the fixture file. */
static UNUSED int persist_share(int card, int dev, int value) {
    const char *path = fixture_path();
    if (!path) return DCMI_ERR_CODE_FILE_OPERATE_FAIL;
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *in = fopen(path, "r");
    if (!in) return DCMI_ERR_CODE_FILE_OPERATE_FAIL;
    FILE *out = fopen(tmp, "w");
    if (!out) { fclose(in); return DCMI_ERR_CODE_FILE_OPERATE_FAIL; }
    char line[LINE_LEN], copy[LINE_LEN];
    while (fgets(line, sizeof(line), in)) {
        struct npu n;
        if (strncmp(line, "npu ", 4) != 0) { fputs(line, out); continue; }
        snprintf(copy, sizeof(copy), "%s", line);
        parse_npu_line(copy, &n);
        if (n.card != card || n.dev != dev) { fputs(line, out); continue; }
        int wrote = 0;
        char *save = NULL;
        fputs("npu", out);
        for (char *tok = strtok_r(line + 4, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
            if (!strncmp(tok, "share=", 6)) { fprintf(out, " share=%d", value); wrote = 1; }
            else fprintf(out, " %s", tok);
        }
        if (!wrote) fprintf(out, " share=%d", value);
        fputc('\n', out);
    }
    fclose(in);
    if (fclose(out) != 0 || rename(tmp, path) != 0) return DCMI_ERR_CODE_FILE_OPERATE_FAIL;
    return DCMI_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* V1                                                                                               */
/* ---------------------------------------------------------------------------------------------- */

#ifndef FAKE_DCMI_NO_V1

#define V1_GATE()                                              \
    do {                                                       \
        if (load() != 0) return DCMI_ERR_CODE_INNER_ERR;       \
        if (F.api != 1) return DCMI_ERR_CODE_NOT_SUPPORT;      \
        if (!v1_ready) return DCMI_ERR_CODE_NOT_REDAY;         \
    } while (0)

#define V1_DEVICE(n, card, dev)                                \
    struct npu *n = find(card, dev);                           \
    if (!n) return DCMI_ERR_CODE_INVALID_DEVICE_ID

int dcmi_init(void) {
    if (load() != 0) return DCMI_ERR_CODE_INNER_ERR;
    int rc = F.api == 1 ? F.init_rc : F.v1_init_rc;
    v1_ready = rc == DCMI_OK;
    return rc;
}

static int card_list(int *card_num, int *card_list, int list_len) {
    V1_GATE();
    if (F.card_list_rc) return F.card_list_rc;
    if (!card_num || !card_list) return DCMI_ERR_CODE_INVALID_PARAMETER;
    int count = 0;
    for (int i = 0; i < F.n; i++) {
        int seen = 0;
        for (int j = 0; j < count; j++) seen |= card_list[j] == F.npus[i].card;
        if (seen) continue;
        if (count >= list_len) return DCMI_ERR_CODE_INVALID_PARAMETER;
        card_list[count++] = F.npus[i].card;
    }
    *card_num = count;
    return DCMI_OK;
}

int dcmi_get_card_list(int *card_num, int *card_list_out, int list_len) {
    return card_list(card_num, card_list_out, list_len);
}

int dcmi_get_card_num_list(int *card_num, int *card_list_out, int list_len) {
    return card_list(card_num, card_list_out, list_len);
}

int dcmi_get_device_num_in_card(int card_id, int *device_num) {
    V1_GATE();
    int count = 0;
    for (int i = 0; i < F.n; i++) count += F.npus[i].card == card_id;
    if (!count) return DCMI_ERR_CODE_INVALID_DEVICE_ID;
    *device_num = count;
    return DCMI_OK;
}

int dcmi_get_device_type(int card_id, int device_id, enum dcmi_unit_type *device_type) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    *device_type = (enum dcmi_unit_type)n->type;
    return DCMI_OK;
}

int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    *device_logic_id = n->logic;
    return DCMI_OK;
}

int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid) {
    V1_GATE();
    for (int i = 0; i < F.n; i++) {
        if (F.npus[i].logic == (int)logicid && F.npus[i].type == NPU_TYPE) {
            if (F.npus[i].phy_rc) return F.npus[i].phy_rc;
            *phyid = (unsigned int)F.npus[i].phy;
            return DCMI_OK;
        }
    }
    return DCMI_ERR_CODE_INVALID_DEVICE_ID;
}

int dcmi_get_device_chip_info(int card_id, int device_id, struct dcmi_chip_info *chip_info) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (n->chip_rc) return n->chip_rc;
    fill_name(chip_info->chip_type, n->chip_type);
    fill_name(chip_info->chip_name, n->chip_name);
    fill_name(chip_info->chip_ver, n->chip_ver);
    chip_info->aicore_cnt = n->aicore;
    return DCMI_OK;
}

int dcmi_get_device_die_v2(int card_id, int device_id, enum dcmi_die_type input_type, struct dcmi_die_id *die_id) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (input_type != VDIE && input_type != NDIE) return DCMI_ERR_CODE_NOT_SUPPORT;
    if (n->die_rc) return n->die_rc;
    memcpy(die_id->soc_die, n->die, sizeof(n->die));
    return DCMI_OK;
}

int dcmi_get_device_die(int card_id, int device_id, struct dcmi_die_id *device_die) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (n->die_rc) return n->die_rc;
    memcpy(device_die->soc_die, n->die, sizeof(n->die));
    return DCMI_OK;
}

int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (n->hbm_rc) return n->hbm_rc;
    fill_hbm(n, hbm_info);
    return DCMI_OK;
}

int dcmi_get_device_memory_info_v3(int card_id, int device_id, struct dcmi_get_memory_info_stru *memory_info) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (!n->ddr_mb) return DCMI_ERR_CODE_NOT_SUPPORT;
    memset(memory_info, 0, sizeof(*memory_info));
    memory_info->memory_size = n->ddr_mb;
    memory_info->memory_available = n->ddr_avail_mb;
    memory_info->utiliza = n->ddr_util;
    memory_info->hugepagesize = 2048;
    return DCMI_OK;
}

int dcmi_get_device_memory_info_v2(int card_id, int device_id, struct dcmi_memory_info *memory_info) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (!n->ddr_mb) return DCMI_ERR_CODE_NOT_SUPPORT;
    memset(memory_info, 0, sizeof(*memory_info));
    memory_info->memory_size = n->ddr_mb;
    memory_info->utiliza = n->ddr_util;
    return DCMI_OK;
}

int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (n->pcie_rc) return n->pcie_rc;
    fill_pcie_all(n, pcie_info);
    return DCMI_OK;
}

int dcmi_get_device_pcie_info(int card_id, int device_id, struct dcmi_pcie_info *pcie_info) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (n->pcie_rc) return n->pcie_rc;
    pcie_info->deviceid = n->pci_device;
    pcie_info->venderid = n->pci_vendor;
    pcie_info->subvenderid = n->sub_vendor;
    pcie_info->subdeviceid = n->sub_device;
    pcie_info->bdf_deviceid = n->devno;
    pcie_info->bdf_busid = n->bus;
    pcie_info->bdf_funcid = n->fn;
    return DCMI_OK;
}

int dcmi_get_driver_version(char *driver_ver, unsigned int len) {
    V1_GATE();
    if (F.driver_version_rc) return F.driver_version_rc;
    return copy_version(F.driver_version, driver_ver, len);
}

int dcmi_get_dcmi_version(char *dcmi_ver, unsigned int len) {
    V1_GATE();
    return copy_version(F.dcmi_version, dcmi_ver, len);
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type, unsigned int *utilization_rate) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (n->util_rc) return n->util_rc;
    if (input_type != 2) return DCMI_ERR_CODE_NOT_SUPPORT; /* DCMI_UTILIZATION_RATE_AICORE only */
    *utilization_rate = n->util_aicore;
    return DCMI_OK;
}

int dcmi_get_device_temperature(int card_id, int device_id, int *temperature) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (n->temp_rc) return n->temp_rc;
    *temperature = n->temp;
    return DCMI_OK;
}

int dcmi_get_device_power_info(int card_id, int device_id, int *power) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    if (n->power_rc) return n->power_rc;
    *power = n->power;
    return DCMI_OK;
}

#ifndef FAKE_DCMI_NO_SHARE
int dcmi_get_device_share_enable(int card_id, int device_id, int *enable_flag) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    int rc = rc_or(n->share_get_rc, F.share_get_rc);
    if (rc) return rc;
    *enable_flag = n->share;
    return DCMI_OK;
}

int dcmi_set_device_share_enable(int card_id, int device_id, int enable_flag) {
    V1_GATE();
    V1_DEVICE(n, card_id, device_id);
    int rc = rc_or(n->share_set_rc, F.share_set_rc);
    if (rc) return rc;
    if (enable_flag != 0 && enable_flag != 1) return DCMI_ERR_CODE_INVALID_PARAMETER;
    return persist_share(card_id, device_id, enable_flag);
}
#endif /* FAKE_DCMI_NO_SHARE */

#endif /* FAKE_DCMI_NO_V1 */

/* ---------------------------------------------------------------------------------------------- */
/* V2                                                                                               */
/* ---------------------------------------------------------------------------------------------- */

#define V2_GATE()                                              \
    do {                                                       \
        if (load() != 0) return DCMI_ERR_CODE_INNER_ERR;       \
        if (F.api != 2) return DCMI_ERR_CODE_NOT_SUPPORT;      \
        if (!v2_ready) return DCMI_ERR_CODE_NOT_REDAY;         \
    } while (0)

#define V2_DEVICE(n, dev_id)                                   \
    struct npu *n = find(dev_id, 0);                           \
    if (!n) return DCMI_ERR_CODE_INVALID_DEVICE_ID

int dcmiv2_init(void) {
    if (load() != 0) return DCMI_ERR_CODE_INNER_ERR;
    int rc = F.api == 2 ? F.init_rc : DCMI_ERR_CODE_NOT_SUPPORT;
    v2_ready = rc == DCMI_OK;
    return rc;
}

int dcmiv2_get_device_list(int *device_list, int *device_cnt, int list_len) {
    V2_GATE();
    if (F.card_list_rc) return F.card_list_rc;
    if (!device_list || !device_cnt) return DCMI_ERR_CODE_INVALID_PARAMETER;
    if (F.n > list_len) return DCMI_ERR_CODE_INVALID_PARAMETER;
    for (int i = 0; i < F.n; i++) device_list[i] = F.npus[i].card;
    *device_cnt = F.n;
    return DCMI_OK;
}

int dcmiv2_get_device_type(int dev_id, enum dcmi_unit_type *device_type) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    *device_type = (enum dcmi_unit_type)n->type;
    return DCMI_OK;
}

int dcmiv2_get_device_chip_info(int dev_id, struct dcmi_chip_info_v2 *chip_info) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    if (n->chip_rc) return n->chip_rc;
    fill_name(chip_info->chip_type, n->chip_type);
    fill_name(chip_info->chip_name, n->chip_name);
    fill_name(chip_info->chip_ver, n->chip_ver);
    fill_name(chip_info->npu_name, n->chip_name);
    chip_info->aicore_cnt = n->aicore;
    return DCMI_OK;
}

/* The A5 generation serves the DDIE only (the VDIE and NDIE answer NOT_SUPPORT). */
int dcmiv2_get_device_die_id(int dev_id, enum dcmi_die_type input_type, struct dcmi_die_id *die_id) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    if (input_type != DDIE) return DCMI_ERR_CODE_NOT_SUPPORT;
    if (n->die_rc) return n->die_rc;
    memcpy(die_id->soc_die, n->die, sizeof(n->die));
    return DCMI_OK;
}

int dcmiv2_get_device_hbm_info(int dev_id, struct dcmi_hbm_info *hbm_info) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    if (n->hbm_rc) return n->hbm_rc;
    fill_hbm(n, hbm_info);
    return DCMI_OK;
}

int dcmiv2_get_chip_phy_id_by_dev_id(int dev_id, unsigned int *phyid) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    if (n->phy_rc) return n->phy_rc;
    *phyid = (unsigned int)n->phy;
    return DCMI_OK;
}

int dcmiv2_get_device_pcie_info(int dev_id, struct dcmi_pcie_info_all *pcie_info) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    if (n->pcie_rc) return n->pcie_rc;
    fill_pcie_all(n, pcie_info);
    return DCMI_OK;
}

int dcmiv2_get_dcmi_version(char *dcmi_ver, unsigned int len) {
    V2_GATE();
    return copy_version(F.dcmi_version, dcmi_ver, len);
}

int dcmiv2_get_device_utilization_rate(int dev_id, int input_type, unsigned int *utilization_rate) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    if (n->util_rc) return n->util_rc;
    if (input_type != 2) return DCMI_ERR_CODE_NOT_SUPPORT;
    *utilization_rate = n->util_aicore;
    return DCMI_OK;
}

int dcmiv2_get_device_temperature(int dev_id, int *temperature) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    if (n->temp_rc) return n->temp_rc;
    *temperature = n->temp;
    return DCMI_OK;
}

int dcmiv2_get_device_power_info(int dev_id, int *power_info) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    if (n->power_rc) return n->power_rc;
    *power_info = n->power;
    return DCMI_OK;
}

int dcmiv2_get_mainboard_id(int dev_id, unsigned int *mainboard_id) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    (void)n;
    if (F.mainboard_rc) return F.mainboard_rc;
    *mainboard_id = F.mainboard_id;
    return DCMI_OK;
}

/* Only the super pod query (CHIP_INF / SPOD_INFO) is served. */
int dcmiv2_get_device_info(int dev_id, enum dcmi_main_cmd main_cmd, unsigned int sub_cmd, void *buf,
                           unsigned int *size) {
    V2_GATE();
    V2_DEVICE(n, dev_id);
    (void)n;
    if (main_cmd != DCMI_MAIN_CMD_CHIP_INF || sub_cmd != DCMI_CHIP_INF_SUB_CMD_SPOD_INFO)
        return DCMI_ERR_CODE_NOT_SUPPORT;
    if (F.spod_rc) return F.spod_rc;
    if (!buf || !size || *size < sizeof(struct dcmi_spod_info)) return DCMI_ERR_CODE_INVALID_PARAMETER;
    struct dcmi_spod_info info;
    memset(&info, 0, sizeof(info));
    info.sdid = (unsigned int)dev_id;
    info.super_pod_size = 1;
    info.super_pod_type = F.super_pod_type;
    memcpy(buf, &info, sizeof(info));
    *size = sizeof(info);
    return DCMI_OK;
}
