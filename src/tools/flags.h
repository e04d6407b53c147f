/* What the CLI needs to read its flags as the library reads options: the strict
 * number grammar (core/parse.h), shared so that a value means the same on the command
 * line and in herd_train_config_set. */
#ifndef HERD_TOOLS_FLAGS_H
#define HERD_TOOLS_FLAGS_H

#include "core/parse.h"

#endif
