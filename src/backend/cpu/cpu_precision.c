/* The CPU backend's arithmetic: fp32, or bf16 mixed precision (bf16 inputs to
 * convolutions and GEMMs, fp32 accumulation and outputs), and the instruction set
 * oneDNN dispatches to, which decides whether bf16 is worth running. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_dnnl.h"
#include "backend/cpu/cpu_ops.h"
#include "core/half.h"
#include "core/parse.h"

static _Atomic int g_bf16_mode = HERD_CPU_BF16_OFF;

herd_cpu_bf16_mode herd_cpu_bf16(void) { return (herd_cpu_bf16_mode)atomic_load(&g_bf16_mode); }

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    switch ((int)isa) {
    case dnnl_cpu_isa_sse41: return "SSE4.1";
    case dnnl_cpu_isa_avx: return "AVX";
    case dnnl_cpu_isa_avx2: return "AVX2";
    case dnnl_cpu_isa_avx2_vnni: return "AVX2 with VNNI";
    case dnnl_cpu_isa_avx512_mic:
    case dnnl_cpu_isa_avx512_mic_4ops: return "AVX-512 (Xeon Phi)";
    case dnnl_cpu_isa_avx512_core: return "AVX-512";
    case dnnl_cpu_isa_avx512_core_vnni: return "AVX-512 with VNNI";
    case dnnl_cpu_isa_avx512_core_bf16: return "AVX-512 with VNNI and BF16";
    case dnnl_cpu_isa_avx512_core_amx: return "AVX-512 with AMX";
    }
    return "no vector extensions oneDNN uses";
}

/* oneDNN's ISA values are bit sets: each includes the ones below it. */
static bool isa_has(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t want)
{
    return ((unsigned)isa & (unsigned)want) == (unsigned)want;
}

bool herd_cpu_native_bf16(void)
{
    return isa_has(dnnl_get_effective_cpu_isa(), dnnl_cpu_isa_avx512_core_bf16);
}

const char *herd_cpu_isa(void)
{
    static char text[160];
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    snprintf(text, sizeof text, "%s (bf16: %s)", isa_name(isa),
             isa_has(isa, dnnl_cpu_isa_avx512_core_bf16) ? "native"
             : isa_has(isa, dnnl_cpu_isa_avx512_core)    ? "emulated by oneDNN, slower than fp32"
                                                         : "none in oneDNN");
    return text;
}

/* HERD_CPU_BF16=emulate: bf16's numerics without bf16 instructions (inputs rounded
 * to bf16, fp32 kernels), for testing on CPUs without them; never chosen by itself. */
static herd_status emulation_asked(bool *out)
{
    static const char *const modes[] = {"native", "emulate", NULL};
    int which;
    herd_status st = herd_env_choice("HERD_CPU_BF16", modes, &which);
    *out = which == 1;
    return st;
}

herd_status herd_cpu_set_precision(herd_precision p)
{
    if (p == HERD_PRECISION_FP32) {
        atomic_store(&g_bf16_mode, HERD_CPU_BF16_OFF);
        return HERD_OK;
    }
    if (p == HERD_PRECISION_TF32)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "the cpu backend computes in fp32 or bf16; --precision tf32 needs "
                        "--device cuda (or use --precision bf16 or fp32)");
    if (p != HERD_PRECISION_BF16)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "the cpu backend computes in fp32 or bf16, not %s (use --precision bf16 "
                        "or fp32)",
                        herd_precision_name(p));
    bool emulate;
    herd_status st = emulation_asked(&emulate);
    if (st != HERD_OK)
        return st;
    if (emulate) {
        atomic_store(&g_bf16_mode, HERD_CPU_BF16_EMULATED);
        return HERD_OK;
    }
    if (!herd_cpu_native_bf16())
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "--precision bf16 needs a CPU with bf16 instructions (AVX512_BF16 or AMX); "
                        "oneDNN dispatches to %s here: use --precision fp32 "
                        "(HERD_CPU_BF16=emulate runs bf16's rounding on fp32 kernels, slower "
                        "than fp32, for testing only)",
                        herd_cpu_isa());
    atomic_store(&g_bf16_mode, HERD_CPU_BF16_NATIVE);
    return HERD_OK;
}

void herd_cpu_round_bf16(float *x, size_t n)
{
    HERD_CPU_FOR(herd_cpu_par(n), size_t, i, n,
        x[i] = herd_bf16_to_float(herd_float_to_bf16(x[i]));
    );
}
