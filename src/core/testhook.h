/* Failure injection, a test hook compiled into every build: HERD_TEST_FAIL_AT=SITE:RANK
 * makes rank RANK fail just before the collective named SITE (every site is
 * exercised by tests/cli_fail_points.sh). Unset, it costs one cached getenv. Never
 * set it outside tests. Three sites do something else: "diverge" flips one parameter
 * bit on that rank after its first step (for --check-replicas), "stop" makes that
 * rank stop itself with SIGSTOP before its second step (for the stall inspector),
 * "overflow" makes that rank find inf in its part of the gradients once, where the
 * loss scaler's decision is agreed over ranks holding parts (ZeRO, pipeline stages). */
#ifndef HERD_CORE_TESTHOOK_H
#define HERD_CORE_TESTHOOK_H

#include "herd/herd.h"

/* HERD_TEST_STEP_DELAY_MS=N (1..10000): every training step first sleeps N ms, so a test
 * that acts on a running job (kills a rank at a step) is not raced by a job that ends
 * first; sleeping takes no CPU from the other tests. Unset: nothing. */
void herd_test_step_delay(void);
/* Whether HERD_TEST_FAIL_AT names this site and rank. */
bool herd_test_hook(const char *site, int rank);
/* HERD_ERR_INTERNAL ("injected failure at SITE on rank RANK") when the hook names
 * this site and rank, else HERD_OK. */
herd_status herd_fail_point(const char *site, int rank);

#endif
