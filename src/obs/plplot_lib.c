#include "obs/plplot_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* PLplot 5.15's ABI (Debian 12's libplplot17). */
#define PLPLOT_SONAME "libplplot.so.17"

static herd_plplot_lib lib;
static char failure[512];
static pthread_once_t opened = PTHREAD_ONCE_INIT;

#define SLOT(field, symbol) {offsetof(herd_plplot_lib, field), symbol}
static const struct {
    size_t offset;
    const char *symbol;
} symbols[] = {
    SLOT(sabort, "plsabort"),       SLOT(gdevs, "plgDevs"),         SLOT(sdev, "c_plsdev"),
    SLOT(sfnam, "c_plsfnam"),       SLOT(spage, "c_plspage"),       SLOT(scmap0, "c_plscmap0"),
    SLOT(ssub, "c_plssub"),         SLOT(init, "c_plinit"),         SLOT(end, "c_plend"),
    SLOT(adv, "c_pladv"),           SLOT(gchr, "c_plgchr"),         SLOT(gspa, "c_plgspa"),
    SLOT(schr, "c_plschr"),         SLOT(vpor, "c_plvpor"),         SLOT(wind, "c_plwind"),
    SLOT(syax, "c_plsyax"),         SLOT(box, "c_plbox"),           SLOT(slabelfunc, "c_plslabelfunc"),
    SLOT(lab, "c_pllab"),           SLOT(mtex, "c_plmtex"),         SLOT(col0, "c_plcol0"),
    SLOT(width, "c_plwidth"),       SLOT(line, "c_plline"),         SLOT(string, "c_plstring"),
    SLOT(fill, "c_plfill"),         SLOT(legend, "c_pllegend"),
};
/* Every field is a function pointer, and every one is resolved. */
_Static_assert(sizeof symbols / sizeof symbols[0] * sizeof(void (*)(void)) == sizeof(herd_plplot_lib),
               "a PLplot function without its symbol");

static void open_once(void)
{
    void *h = dlopen(PLPLOT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(failure, sizeof failure, "cannot load %s: %s; install libplplot17 and "
                 "plplot-driver-cairo (scripts/install-deps.sh)", PLPLOT_SONAME, dlerror());
        return;
    }
    herd_plplot_lib l;
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *f = dlsym(h, symbols[i].symbol);
        if (!f) {
            snprintf(failure, sizeof failure, "%s has no function %s (%s); herd needs PLplot 5.15's",
                     PLPLOT_SONAME, symbols[i].symbol, dlerror());
            dlclose(h);
            return;
        }
        memcpy((char *)&l + symbols[i].offset, &f, sizeof f);
    }
    lib = l;
}

herd_status herd_plplot_open(const herd_plplot_lib **out)
{
    pthread_once(&opened, open_once);
    *out = lib.init ? &lib : NULL;
    return lib.init ? HERD_OK : HERD_ERR(HERD_ERR_UNSUPPORTED, "PLplot: %s", failure);
}
