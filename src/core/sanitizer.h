/* HERD_ASAN: 1 when this file is compiled under AddressSanitizer (clang says so through
 * __has_feature, GCC through __SANITIZE_ADDRESS__), else 0. */
#ifndef HERD_CORE_SANITIZER_H
#define HERD_CORE_SANITIZER_H

#if defined(__SANITIZE_ADDRESS__)
#define HERD_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HERD_ASAN 1
#endif
#endif
#ifndef HERD_ASAN
#define HERD_ASAN 0
#endif

#endif
