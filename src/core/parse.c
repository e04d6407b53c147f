/* Strict numbers (core/parse.h). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"

/* One grammar for every number: an optional '-', decimal digits, for
 * floats a fraction and an exponent; nothing else (no spaces, '+', hex, inf or nan,
 * which strtol/strtod would take and strtoull would turn " -1" into 2^64-1).
 * Returns the length of the number at s (0: none). */
static size_t number_span(const char *s, bool allow_sign, bool allow_float)
{
    const char *p = s;
    if (allow_sign && *p == '-')
        p++;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9')
        p++, digits++;
    if (allow_float && *p == '.') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++, digits++;
    }
    if (!digits)
        return 0;
    if (allow_float && (*p == 'e' || *p == 'E')) {
        const char *e = p + 1;
        if (*e == '-' || *e == '+')
            e++;
        if (!(*e >= '0' && *e <= '9'))
            return 0;
        while (*e >= '0' && *e <= '9')
            e++;
        p = e;
    }
    return (size_t)(p - s);
}

bool herd_parse_long(const char *s, long lo, long hi, long *out)
{
    size_t n = number_span(s, true, false);
    if (!n || s[n])
        return false;
    errno = 0;
    long v = strtol(s, NULL, 10);
    if (errno || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

bool herd_parse_double(const char *s, double lo, double hi, double *out)
{
    size_t n = number_span(s, true, true);
    if (!n || s[n])
        return false;
    errno = 0;
    double v = strtod(s, NULL);
    if (errno || !isfinite(v) || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

/* Byte counts as nccl-tests writes them: 8, 64K, 128M, 1G (binary multiples). */
bool herd_parse_size(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    size_t n = number_span(s, false, false);
    if (!n)
        return false;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno)
        return false;
    const char *end = s + n;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10, end++; break;
    case 'm': case 'M': shift = 20, end++; break;
    case 'g': case 'G': shift = 30, end++; break;
    default: break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end || v > (UINT64_MAX >> shift))
        return false;
    v <<= shift;
    if (v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

herd_status herd_env_choice(const char *name, const char *const *choices, int *out)
{
    const char *v = getenv(name);
    *out = 0;
    if (!v || !*v)
        return HERD_OK;
    char list[256] = "";
    size_t used = 0;
    for (int i = 0; choices[i]; i++) {
        if (strcmp(v, choices[i]) == 0) {
            *out = i;
            return HERD_OK;
        }
        int n = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", choices[i]);
        if (n > 0 && (size_t)n < sizeof list - used)
            used += (size_t)n;
    }
    return HERD_INPUT_ERR(HERD_ERR_INVALID_ARG, "%s='%s' is not one of %s; set one of them or "
                          "unset it (default %s)", name, v, list, choices[0]);
}
