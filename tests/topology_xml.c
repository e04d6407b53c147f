/* Writes this machine's topology as hwloc XML to the file named by argv[1]: the test
 * fixture behind OMPI_MCA_hwloc_base_topo_file (tests/CMakeLists.txt), so that each
 * rank of a test's launch reads the topology instead of discovering it again. */
#include <hwloc.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: topology_xml FILE\n");
        return 2;
    }
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0) {
        perror("topology_xml: hwloc_topology_init");
        return 1;
    }
    /* The I/O devices Open MPI itself keeps when it discovers (NICs, GPUs). */
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    int rc = hwloc_topology_load(topo);
    if (rc == 0)
        rc = hwloc_topology_export_xml(topo, argv[1], 0);
    hwloc_topology_destroy(topo);
    if (rc != 0) {
        perror("topology_xml: cannot discover the topology or write it");
        return 1;
    }
    return 0;
}
