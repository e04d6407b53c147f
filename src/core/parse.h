/* Strict numbers, as every flag and option of herd takes them: an optional '-' and
 * decimal digits (floats: also a fraction and an exponent), nothing around them; no
 * spaces, '+', hex, inf or nan (which strtol/strtod would take, and strtoull would turn
 * " -1" into 2^64-1); in [lo, hi]. The CLI's flags (through tools/tools.h) and
 * herd_train_config_set share them, so a value means the same everywhere. */
#ifndef HERD_CORE_PARSE_H
#define HERD_CORE_PARSE_H

#include <stdbool.h>
#include <stdint.h>

#include "herd/herd.h" /* herd_status */

bool herd_parse_long(const char *s, long lo, long hi, long *out);
bool herd_parse_double(const char *s, double lo, double hi, double *out);
/* Sizes with K/M/G suffixes (powers of 1024) and an optional B: "64K", "1G", "4096". */
bool herd_parse_size(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);

/* An environment variable that names one of `choices` (NULL-terminated; the first is
 * the default, taken when it is unset or empty): its index in *out. Any other value is
 * an error naming the variable, the value and the choices, not the default taken
 * silently (HERD_CONV_ALGO=Winograd would otherwise train on direct convolutions). */
herd_status herd_env_choice(const char *name, const char *const *choices, int *out);

#endif
