/* GPU-to-GPU link classes (the legend of `nvidia-smi topo -m`) and PCI bus ids. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>

#include "tools/tools.h"

herd_link herd_link_classify(const herd_pci_locus *a, const herd_pci_locus *b, int nvlinks)
{
    if (a->device == b->device)
        return (herd_link){HERD_LINK_SELF, 0};
    if (nvlinks > 0)
        return (herd_link){HERD_LINK_NVLINK, nvlinks};
    /* An unknown NUMA node could be another socket: it counts as the farther class. */
    if (a->numa < 0 || b->numa < 0 || a->numa != b->numa)
        return (herd_link){HERD_LINK_SYS, 0};
    if (a->host_bridge != b->host_bridge)
        return (herd_link){HERD_LINK_NODE, 0};
    int common = 0;
    while (common < a->n_bridges && common < b->n_bridges &&
           a->bridges[common] == b->bridges[common])
        common++;
    if (common == 0) /* they meet only at the host bridge */
        return (herd_link){HERD_LINK_PHB, 0};
    /* Below the deepest shared bridge, one more bridge per side is a switch's
     * downstream port: both sit on one switch. More is a cascade of switches. */
    int below_a = a->n_bridges - common, below_b = b->n_bridges - common;
    return (herd_link){below_a <= 1 && below_b <= 1 ? HERD_LINK_PIX : HERD_LINK_PXB, 0};
}

herd_link herd_link_from_nvml_level(int level, int nvlinks)
{
    if (level == 0)
        return (herd_link){HERD_LINK_SELF, 0};
    if (nvlinks > 0)
        return (herd_link){HERD_LINK_NVLINK, nvlinks};
    switch (level) {
    case 10: return (herd_link){HERD_LINK_PIX, 0};
    case 20: return (herd_link){HERD_LINK_PXB, 0};
    case 30: return (herd_link){HERD_LINK_PHB, 0};
    case 40: return (herd_link){HERD_LINK_NODE, 0};
    case 50: return (herd_link){HERD_LINK_SYS, 0};
    default: return (herd_link){HERD_LINK_UNKNOWN, 0};
    }
}

const char *herd_link_name(herd_link l, char buf[8])
{
    static const char *const names[] = {"X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS", "?"};
    if (l.kind == HERD_LINK_NVLINK)
        snprintf(buf, 8, "NV%u", (unsigned)l.nvlinks % 1000u);
    else
        snprintf(buf, 8, "%s", names[l.kind <= HERD_LINK_UNKNOWN ? l.kind : HERD_LINK_UNKNOWN]);
    return buf;
}

static bool parse_hex(const char **s, unsigned max, unsigned *out)
{
    const char *p = *s;
    if (!isxdigit((unsigned char)*p))
        return false;
    char *end;
    unsigned long v = strtoul(p, &end, 16);
    if (v > max || end - p > 8)
        return false;
    *out = (unsigned)v;
    *s = end;
    return true;
}

bool herd_pci_parse(const char *s, herd_pci_addr *out)
{
    herd_pci_addr a = {0};
    unsigned first, second;
    if (!s || !parse_hex(&s, 0xffffffffu, &first) || *s++ != ':' || !parse_hex(&s, 0xffff, &second))
        return false;
    if (*s == ':') { /* domain:bus:dev.func */
        s++;
        if (first > 0xffff || second > 0xff || !parse_hex(&s, 0x1f, &a.dev))
            return false;
        a.domain = first, a.bus = second;
    } else { /* bus:dev.func */
        if (first > 0xff || second > 0x1f)
            return false;
        a.bus = first, a.dev = second;
    }
    if (*s++ != '.' || !parse_hex(&s, 7, &a.func) || *s)
        return false;
    *out = a;
    return true;
}

void herd_pci_format(herd_pci_addr a, char buf[16])
{
    snprintf(buf, 16, "%04x:%02x:%02x.%x", a.domain & 0xffff, a.bus & 0xff, a.dev & 0x1f,
             a.func & 7);
}
