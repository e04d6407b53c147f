/* herd command-line tool: dispatches to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "herd/herd.h"

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("herd %s\n", HERD_VERSION);
        return 0;
    }
    fprintf(stderr, "herd: error: not implemented yet\n");
    return 2;
}
