#include "herd/herd.h"

const char *herd_build_info(void)
{
    return "herd " HERD_VERSION " (cpu backend: oneDNN " HERD_DNNL_VERSION ", OpenMP)";
}
