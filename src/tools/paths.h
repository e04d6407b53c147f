/* What the CLI needs of its output paths, as the library checks its own (core/fs.h):
 * a file that would be written only after a long run is checked before it, and two
 * outputs that name one file are refused. */
#ifndef HERD_TOOLS_PATHS_H
#define HERD_TOOLS_PATHS_H

#include "core/fs.h" /* herd_check_output_file, herd_same_file */

#endif
