/* herd topo: the GPU link classifier on fabricated PCI trees, PCI bus ids, and the
 * discovery of this machine with the rank table of a single process. */
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "testutil.h"
#include "tools/tools.h"

/* A device under host bridge hb on NUMA node numa, below the given bridges. */
static herd_pci_locus locus(int numa, uint64_t hb, uint64_t device, int n, const uint64_t *bridges)
{
    herd_pci_locus l = {.numa = numa, .host_bridge = hb, .n_bridges = n, .device = device};
    for (int i = 0; i < n; i++)
        l.bridges[i] = bridges[i];
    return l;
}

static const char *classify(herd_pci_locus a, herd_pci_locus b, int nvlinks, char buf[8])
{
    return herd_link_name(herd_link_classify(&a, &b, nvlinks), buf);
}

static void test_classifier(void **state)
{
    (void)state;
    char buf[8];
    /* A two-socket machine: host bridges 100, 101 on node 0 and 200 on node 1.
     * Under 100: root port 1 -> switch upstream 2 -> downstream ports 3, 4 (GPUs 10, 11),
     * and downstream 5 -> a second switch 6 -> downstream 7 (GPU 12). Root port 8 (GPU 13). */
    const uint64_t sw_a[] = {1, 2, 3}, sw_b[] = {1, 2, 4}, cascade[] = {1, 2, 5, 6, 7}, rp8[] = {8};
    herd_pci_locus g10 = locus(0, 100, 10, 3, sw_a), g11 = locus(0, 100, 11, 3, sw_b);
    herd_pci_locus g12 = locus(0, 100, 12, 5, cascade), g13 = locus(0, 100, 13, 1, rp8);
    herd_pci_locus g14 = locus(0, 101, 14, 1, rp8), g15 = locus(1, 200, 15, 3, sw_a);

    assert_string_equal(classify(g10, g10, 0, buf), "X");
    assert_string_equal(classify(g10, g11, 0, buf), "PIX");  /* one switch */
    assert_string_equal(classify(g10, g12, 0, buf), "PXB");  /* through a cascade of switches */
    assert_string_equal(classify(g12, g10, 0, buf), "PXB");  /* symmetric */
    assert_string_equal(classify(g10, g13, 0, buf), "PHB");  /* meet at the host bridge */
    assert_string_equal(classify(g13, g14, 0, buf), "NODE"); /* two host bridges, one node */
    assert_string_equal(classify(g10, g15, 0, buf), "SYS");  /* across sockets */
    assert_string_equal(classify(g10, g15, 4, buf), "NV4");  /* NVLink beats any PCIe path */
    assert_string_equal(classify(g10, g11, 18, buf), "NV18");
    /* Two functions on one bridge (no switch) are at most one bridge apart. */
    herd_pci_locus f0 = locus(0, 100, 20, 1, rp8), f1 = locus(0, 100, 21, 1, rp8);
    assert_string_equal(classify(f0, f1, 0, buf), "PIX");
    /* Same bridge ids but different host bridges never match below them. */
    herd_pci_locus other_hb = locus(0, 101, 22, 3, sw_b);
    assert_string_equal(classify(g10, other_hb, 0, buf), "NODE");
    /* An unknown NUMA node could be the other socket. */
    herd_pci_locus unknown = locus(-1, 100, 23, 3, sw_b);
    assert_string_equal(classify(g10, unknown, 0, buf), "SYS");

    herd_link l = herd_link_classify(&g10, &g11, 0);
    assert_int_equal(l.kind, HERD_LINK_PIX);
    assert_int_equal(l.nvlinks, 0);
}

static void test_nvml_levels(void **state)
{
    (void)state;
    char buf[8];
    const struct { int level, nvlinks; const char *want; } cases[] = {
        {0, 0, "X"}, {0, 4, "X"}, {10, 0, "PIX"}, {20, 0, "PXB"}, {30, 0, "PHB"},
        {40, 0, "NODE"}, {50, 0, "SYS"}, {50, 12, "NV12"}, {77, 0, "?"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_string_equal(herd_link_name(herd_link_from_nvml_level(cases[i].level, cases[i].nvlinks), buf),
                            cases[i].want);
}

static void test_pci_bus_ids(void **state)
{
    (void)state;
    herd_pci_addr a;
    char buf[16];
    assert_true(herd_pci_parse("00000000:3B:00.0", &a)); /* NVML */
    assert_int_equal(a.domain, 0);
    assert_int_equal(a.bus, 0x3b);
    herd_pci_format(a, buf);
    assert_string_equal(buf, "0000:3b:00.0");
    assert_true(herd_pci_parse("0001:c1:1f.7", &a)); /* CUDA, sysfs */
    assert_int_equal(a.domain, 1);
    assert_int_equal(a.bus, 0xc1);
    assert_int_equal(a.dev, 0x1f);
    assert_int_equal(a.func, 7);
    assert_true(herd_pci_parse("3b:02.1", &a)); /* no domain */
    herd_pci_format(a, buf);
    assert_string_equal(buf, "0000:3b:02.1");
    const char *bad[] = {"", "3b", "3b:00", "3b:00.8", "3b:20.0", "0000:100:00.0", "zz:00.0",
                         "0000:3b:00.0x", "10000:3b:00.0", NULL};
    for (int i = 0; bad[i]; i++)
        assert_false(herd_pci_parse(bad[i], &a));
    assert_false(herd_pci_parse(NULL, &a));
}

/* The real machine: whatever it has, the counts are consistent and one process's rank
 * table names this process. */
static void test_discover_this_machine(void **state)
{
    (void)state;
    herd_topo *t = NULL;
    assert_herd_ok(herd_topo_discover(&t));
    assert_true(t->pus >= 1 && t->cores >= 1 && t->cores <= t->pus);
    assert_true(t->host[0] != '\0');
    for (int i = 0; i < t->n_nics; i++)
        assert_true(t->nics[i].name[0] != '\0');
    if (t->n_gpus == 0)
        assert_true(t->gpu_note[0] != '\0'); /* says why there are none */
    for (int i = 0; i < t->n_gpus; i++)
        assert_int_equal(t->links[i * t->n_gpus + i].kind, HERD_LINK_SELF);

    herd_comm *c = NULL;
    herd_rank_place *places = NULL;
    assert_herd_ok(herd_comm_local_create(&c));
    assert_herd_ok(herd_topo_rank_places(c, t, &places));
    assert_int_equal(places[0].rank, 0);
    assert_string_equal(places[0].host, c->host);
    assert_true(places[0].cpus[0] != '\0' && strcmp(places[0].cpus, "?") != 0);
    assert_int_equal(places[0].gpu, t->n_gpus > 0 ? 0 : -1);
    free(places);
    herd_comm_destroy(c);
    herd_topo_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_classifier),
        cmocka_unit_test(test_nvml_levels),
        cmocka_unit_test(test_pci_bus_ids),
        cmocka_unit_test(test_discover_this_machine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
