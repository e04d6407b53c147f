/* herd doctor: PCIe Access Control Services on bridges, read from sysfs config space
 * (setpci may not be installed, and needs root anyway). */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "tools/doctor.h"

#define PCI_CLASS_BRIDGE_PCI 0x0604
#define PCI_EXT_CAP_START 0x100
#define PCI_EXT_CAP_ID_ACS 0x000d
#define PCI_ACS_CTRL 6          /* offset of the ACS Control register in the capability */
#define PCI_ACS_REQ_REDIRECT 0x04 /* P2P Request Redirect */
#define PCI_ACS_CMPL_REDIRECT 0x08 /* P2P Completion Redirect */

static unsigned le16(const unsigned char *p) { return p[0] | (unsigned)p[1] << 8; }
static unsigned long le32(const unsigned char *p)
{
    return le16(p) | (unsigned long)le16(p + 2) << 16;
}

/* The ACS Control register of a bridge's config space, -1 when it has no ACS capability. */
static long acs_control(const unsigned char *cfg, long len)
{
    long off = PCI_EXT_CAP_START;
    for (int guard = 0; guard < 128 && off >= PCI_EXT_CAP_START && off + 8 <= len; guard++) {
        unsigned long hdr = le32(cfg + off);
        if (hdr == 0 || hdr == 0xffffffffUL)
            return -1;
        if ((hdr & 0xffff) == PCI_EXT_CAP_ID_ACS)
            return (long)le16(cfg + off + PCI_ACS_CTRL);
        off = (long)((hdr >> 20) & 0xffc);
    }
    return -1;
}

void check_acs(const herd_doctor_env *e, herd_check *c)
{
    DIR *d = doc_opendir(e, "/sys/bus/pci/devices", c);
    if (!d)
        return;
    int bridges = 0, unreadable = 0, redirecting = 0;
    char listed[160] = "";
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        char file[512];
        unsigned char cfg[4096];
        snprintf(file, sizeof file, "/sys/bus/pci/devices/%s/config", de->d_name);
        long len = doc_read(e, file, (char *)cfg, sizeof cfg);
        if (len < 64 || le16(cfg + 0x0a) != PCI_CLASS_BRIDGE_PCI || (cfg[0x0e] & 0x7f) != 1)
            continue;
        bridges++;
        /* Unprivileged reads of sysfs config stop after the first 64 bytes. */
        if (len <= PCI_EXT_CAP_START) {
            unreadable++;
            continue;
        }
        long ctrl = acs_control(cfg, len);
        if (ctrl >= 0 && (ctrl & (PCI_ACS_REQ_REDIRECT | PCI_ACS_CMPL_REDIRECT))) {
            if (redirecting++ < 4)
                doc_append(listed, sizeof listed, ", ", de->d_name);
        }
    }
    closedir(d);
    if (redirecting)
        doc_set(c, HERD_CHECK_WARN,
                "disable ACS redirection on the PCIe switches between GPUs and NICs (BIOS "
                "setting, or as root: setpci -s BDF ECAP_ACS+6.w=0000 for each bridge)",
                "ACS redirects peer-to-peer requests on %d of %d PCI bridge(s) (%s%s): GPU-to-GPU "
                "and GPUDirect RDMA traffic detours through the root complex (slow, or NCCL hangs)",
                redirecting, bridges, listed, redirecting > 4 ? ", ..." : "");
    else if (bridges > 0 && unreadable == bridges)
        doc_set(c, HERD_CHECK_SKIP, NULL, "could not check: the extended configuration space of "
                "the %d PCI bridge(s) is readable only by root; run herd doctor as root, or 'sudo "
                "lspci -vvv | grep ACSCtl'", bridges);
    else if (bridges == 0)
        doc_set(c, HERD_CHECK_PASS, NULL, "no PCI-to-PCI bridges visible, nothing to redirect");
    else if (unreadable)
        doc_set(c, HERD_CHECK_PASS, NULL, "no ACS redirection on %d PCI bridge(s); %d more "
                "readable only by root", bridges - unreadable, unreadable);
    else
        doc_set(c, HERD_CHECK_PASS, NULL, "no ACS redirection on the %d PCI bridge(s)", bridges);
}
