/* HERD_API marks what libherd.so exports: the library is built with hidden symbol
 * visibility (CMake's C_VISIBILITY_PRESET), so everything else in it (the layers,
 * communicators, tools and the CLI's helpers) stays internal to it. Static links see
 * every symbol either way. */
#ifndef HERD_EXPORT_H
#define HERD_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define HERD_API __attribute__((visibility("default")))
#else
#define HERD_API
#endif

#endif
