/* Replica checks: the parameter hash and the cross-rank comparison. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/replica.h"
#include "testutil.h"

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void flip(float *p, size_t i, int bit)
{
    uint32_t u;
    memcpy(&u, &p[i], 4);
    u ^= 1u << bit;
    memcpy(&p[i], &u, 4);
}

static void test_hash_bits(void **state)
{
    (void)state;
    const size_t n = 100003; /* not a multiple of the 8-float block: the tail counts too */
    float *x = malloc(n * sizeof *x);
    tu_fill_uniform(x, n, -1, 1, 3);
    uint64_t h = herd_hash_floats(x, n);
    assert_true(h == herd_hash_floats(x, n)); /* deterministic */
    uint64_t seed = 42;
    for (int t = 0; t < 2000; t++) {
        size_t i = t < 64 ? n - 1 - (size_t)(t % 8) : splitmix(&seed) % n; /* tail, then anywhere */
        int bit = (int)(splitmix(&seed) % 32);
        flip(x, i, bit);
        if (herd_hash_floats(x, n) == h)
            fail_msg("flipping bit %d of element %zu left the hash unchanged", bit, i);
        flip(x, i, bit);
    }
    assert_true(herd_hash_floats(x, n) == h);
    /* Every bit of a short array, and -0.0 vs 0.0 (same value, different bits). */
    float small[11] = {0};
    uint64_t hs = herd_hash_floats(small, 11);
    for (size_t i = 0; i < 11; i++)
        for (int bit = 0; bit < 32; bit++) {
            flip(small, i, bit);
            assert_true(herd_hash_floats(small, 11) != hs);
            flip(small, i, bit);
        }
    /* Length matters even when the extra values are zeros (the tail is zero-padded). */
    for (size_t k = 0; k < 10; k++)
        assert_true(herd_hash_floats(small, k) != herd_hash_floats(small, k + 1));
    assert_true(herd_hash_floats(NULL, 0) == herd_hash_floats(small, 0));
    /* Swapped elements are a different model. */
    float ab[2] = {1, 2}, ba[2] = {2, 1};
    assert_true(herd_hash_floats(ab, 2) != herd_hash_floats(ba, 2));
    free(x);
}

/* A fake 3-rank communicator: allgather hands back crafted per-rank hashes, with
 * this rank's own in its slot. */
typedef struct fake {
    uint64_t hashes[3][2]; /* {params, buffers} per rank; rank 0's set from the data */
    int calls;
} fake;

static herd_status fake_allgather(herd_comm *c, const void *mine, void *all, size_t bytes)
{
    fake *f = c->impl;
    assert_int_equal(bytes, sizeof f->hashes[0]);
    f->calls++;
    memcpy(f->hashes[c->rank], mine, bytes);
    memcpy(all, f->hashes, sizeof f->hashes);
    return HERD_OK;
}

static const herd_comm_ops fake_ops = {.name = "fake", .allgather = fake_allgather};

static void test_check_replicas(void **state)
{
    (void)state;
    float params[37], buffers[5];
    tu_fill_uniform(params, 37, -1, 1, 8);
    tu_fill_uniform(buffers, 5, 0, 1, 9);
    uint64_t hp = herd_hash_floats(params, 37), hb = herd_hash_floats(buffers, 5);
    fake f = {.hashes = {{0, 0}, {hp, hb}, {hp, hb}}};
    herd_comm c = {.ops = &fake_ops, .rank = 0, .size = 3, .impl = &f};

    assert_herd_ok(herd_check_replicas(&c, params, 37, buffers, 5, 10)); /* all agree */

    f.hashes[2][0] = hp ^ 1;
    assert_int_equal(herd_check_replicas(&c, params, 37, buffers, 5, 120), HERD_ERR_INTERNAL);
    const char *e = herd_last_error();
    assert_non_null(strstr(e, "replicas diverged at step 120: rank 2 differs from rank 0"));
    assert_non_null(strstr(e, "parameters"));
    char hex[32];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)(hp ^ 1));
    assert_non_null(strstr(e, hex));

    f.hashes[1][1] = hb + 1; /* rank 1: buffers only */
    assert_int_equal(herd_check_replicas(&c, params, 37, buffers, 5, 121), HERD_ERR_INTERNAL);
    e = herd_last_error();
    assert_non_null(strstr(e, "step 121: ranks 1, 2 differ from rank 0"));
    assert_non_null(strstr(e, "parameters and buffers"));

    f.hashes[2][0] = hp;
    assert_int_equal(herd_check_replicas(&c, params, 37, buffers, 5, 122), HERD_ERR_INTERNAL);
    assert_non_null(strstr(herd_last_error(), "rank 1 differs from rank 0 in their buffers"));

    /* This process is rank 0; a change in its own parameters is caught as well. */
    f.hashes[1][1] = hb;
    params[5] += 1e-7f;
    assert_int_equal(herd_check_replicas(&c, params, 37, buffers, 5, 123), HERD_ERR_INTERNAL);
    assert_non_null(strstr(herd_last_error(), "ranks 1, 2 differ"));

    /* One rank: nothing to compare, no collective. */
    int calls = f.calls;
    herd_comm solo = {.ops = &fake_ops, .rank = 0, .size = 1, .impl = &f};
    assert_herd_ok(herd_check_replicas(&solo, params, 37, NULL, 0, 1));
    assert_int_equal(f.calls, calls);
    assert_int_equal(herd_check_replicas(&c, NULL, 3, NULL, 0, 1), HERD_ERR_INVALID_ARG);
}

/* allreduce_f64 for herd_agree: the other ranks are fine, so the sum is this rank's. */
static herd_status fake_allreduce_f64(herd_comm *c, double *vals, int n)
{
    (void)c, (void)vals, (void)n;
    return HERD_OK;
}

static const herd_comm_ops fake_agree_ops = {.name = "fake", .allgather = fake_allgather,
                                             .allreduce_f64 = fake_allreduce_f64};

/* A device model's parameters: hashed from a host copy made once and kept; the CPU's
 * where they are. */
static void test_check_replicas_on_device(void **state)
{
    (void)state;
    const herd_backend *sim = herd_backend_sim();
    assert_non_null(sim);
    float params[37], buffers[5];
    tu_fill_uniform(params, 37, -1, 1, 8);
    tu_fill_uniform(buffers, 5, 0, 1, 9);
    uint64_t hp = herd_hash_floats(params, 37), hb = herd_hash_floats(buffers, 5);
    float *dp = sim->alloc(sizeof params), *db = sim->alloc(sizeof buffers);
    assert_non_null(dp);
    assert_non_null(db);
    assert_herd_ok(sim->memcpy_h2d(dp, params, sizeof params));
    assert_herd_ok(sim->memcpy_h2d(db, buffers, sizeof buffers));
    fake f = {.hashes = {{0, 0}, {hp, hb}, {hp, hb}}};
    herd_comm c = {.ops = &fake_agree_ops, .rank = 0, .size = 3, .impl = &f};
    herd_replica_stage s = {0};
    assert_herd_ok(herd_check_replicas_on(&c, sim, &s, dp, 37, db, 5, 1));
    float *host = s.host;
    assert_non_null(host);
    assert_int_equal(s.floats, 42);
    f.hashes[2][1] = hb ^ 4;
    assert_int_equal(herd_check_replicas_on(&c, sim, &s, dp, 37, db, 5, 2), HERD_ERR_INTERNAL);
    assert_non_null(strstr(herd_last_error(), "step 2: rank 2 differs from rank 0 in their buffers"));
    assert_ptr_equal(s.host, host); /* kept across checks */
    f.hashes[2][1] = hb;
    /* The device's copy changes: rank 0 differs from both others. */
    flip(params, 3, 0);
    assert_herd_ok(sim->memcpy_h2d(dp, params, sizeof params));
    assert_int_equal(herd_check_replicas_on(&c, sim, &s, dp, 37, db, 5, 3), HERD_ERR_INTERNAL);
    assert_non_null(strstr(herd_last_error(), "ranks 1, 2 differ from rank 0 in their parameters"));
    /* A failed copy (a host array where device memory belongs) fails the check. */
    int calls = f.calls;
    assert_int_not_equal(herd_check_replicas_on(&c, sim, &s, params, 37, db, 5, 4), HERD_OK);
    assert_int_equal(f.calls, calls); /* no hashes were gathered */
    herd_replica_stage_free(&s);
    assert_null(s.host);
    sim->free(dp);
    sim->free(db);

    /* The CPU: no copy. */
    flip(params, 3, 0);
    assert_herd_ok(herd_check_replicas_on(&c, herd_backend_cpu(), &s, params, 37, buffers, 5, 5));
    assert_null(s.host);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash_bits),
        cmocka_unit_test(test_check_replicas),
        cmocka_unit_test(test_check_replicas_on_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
