/* Communicators for gradients in device memory, checked on the CPU: the staged
 * communicator (device -> host copy, host reduction, copy back in wait_all) over the
 * single-process communicator and the CPU backend, the forwarding of host
 * collectives, the buffer broadcast, NCCL's refusal without a GPU, and one process's
 * device communicator on the simulated device. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#include "backend/backend.h"
#include "dist/comm.h"

static void test_staged_reduction(void **state)
{
    (void)state;
    herd_comm *local, *c;
    assert_herd_ok(herd_comm_local_create(&local));
    assert_herd_ok(herd_comm_staged_create(local, herd_backend_cpu(), &c));
    assert_int_equal(c->rank, 0);
    assert_int_equal(c->size, 1);
    assert_string_equal(c->ops->name, "mpi-staged");
    float grads[10];
    for (int i = 0; i < 10; i++)
        grads[i] = (float)i;
    /* Two buckets, as backward starts them. */
    assert_herd_ok(c->ops->allreduce_start(c, grads + 6, 4, 0.5f, HERD_WIRE_FP32, "bucket 0"));
    assert_herd_ok(c->ops->allreduce_start(c, grads, 6, 0.5f, HERD_WIRE_FP32, "bucket 1"));
    /* The reduction works on the host copy: the "device" buffer changes only in wait. */
    assert_true(grads[9] == 9.0f);
    /* A buffer already in flight is refused rather than reduced twice. */
    assert_int_not_equal(c->ops->allreduce_start(c, grads, 6, 0.5f, HERD_WIRE_FP32, "again"),
                         HERD_OK);
    assert_herd_ok(c->ops->wait_all(c));
    for (int i = 0; i < 10; i++)
        assert_true(grads[i] == 0.5f * (float)i);
    /* The next step reuses the host copies. */
    assert_herd_ok(c->ops->allreduce_start(c, grads, 6, 2.0f, HERD_WIRE_FP32, "bucket 1"));
    assert_herd_ok(c->ops->wait_all(c));
    assert_true(grads[5] == 5.0f);
    assert_true(grads[6] == 3.0f);

    /* Host collectives go to the wrapped communicator. */
    double v[2] = {1.5, 2.5};
    assert_herd_ok(c->ops->allreduce_f64(c, v, 2));
    assert_true(v[0] == 1.5 && v[1] == 2.5);
    assert_herd_ok(c->ops->reduce_scatter_f64(c, v, (int[]){2}));
    assert_true(v[0] == 1.5 && v[1] == 2.5);
    assert_int_equal(c->ops->reduce_scatter_f64(c, v, NULL), HERD_ERR_INVALID_ARG); /* the host's check */
    float f[2] = {1, 2};
    assert_herd_ok(c->ops->allgatherv_f32(c, f, (int[]){2}));
    assert_int_equal(c->ops->allgatherv_f32(c, f, NULL), HERD_ERR_INVALID_ARG);
    int mine = 7, all = 0;
    assert_herd_ok(c->ops->allgather(c, &mine, &all, sizeof mine));
    assert_int_equal(all, 7);
    assert_herd_ok(c->ops->barrier(c));
    assert_int_not_equal(c->ops->broadcast(c, v, sizeof v, 1), HERD_OK); /* no rank 1 */
    assert_true(herd_comm_wrapped(c) == local);
    assert_true(herd_comm_host_side(c) == local && herd_comm_host_side(local) == local);
    c->ops->set_activity(c, "testing");
    /* A trace attached to the wrapper reaches the host, which runs the reductions
     * (nothing records into it here: the local communicator traces nothing). */
    const herd_trace_sink *trace = &(herd_trace_sink){.ctx = &all};
    herd_comm_set_trace(c, trace);
    assert_true(c->trace == trace && local->trace == trace);
    herd_comm_set_trace(c, NULL);
    assert_true(c->trace == NULL && local->trace == NULL);
    herd_comm_set_trace(local, trace); /* not a wrapper: only itself */
    assert_true(local->trace == trace && c->trace == NULL);
    herd_comm_set_trace(local, NULL);

    assert_herd_ok(herd_comm_broadcast_buffer(c, herd_backend_cpu(), grads, sizeof grads, 0));
    assert_true(grads[6] == 3.0f);
    herd_comm_destroy(c);
    herd_comm_destroy(local);
}

static void test_device_choice(void **state)
{
    (void)state;
    herd_comm *local, *c;
    assert_herd_ok(herd_comm_local_create(&local));
    /* A host-memory backend has no GPU to hand to NCCL: staged. */
    assert_herd_ok(herd_comm_device_create(local, herd_backend_cpu(), &c));
    assert_string_equal(c->ops->name, "mpi-staged");
    herd_comm_destroy(c);
    herd_status st = herd_comm_nccl_create(local, &c);
    if (herd_have_nccl() && herd_backend_cuda_visible()) {
        /* A GPU host: a communicator of one rank comes up. */
        assert_herd_ok(st);
        assert_string_equal(c->ops->name, "nccl");
        herd_comm_destroy(c);
    } else {
        /* NCCL needs a GPU and a build with NCCL: a clear refusal, nothing created. */
        assert_int_equal(st, HERD_ERR_UNSUPPORTED);
        assert_null(c);
        assert_true(strstr(herd_last_error(), "NCCL") != NULL);
    }
    herd_comm_destroy(local);
}

/* One process on the simulated device (a pipeline stage group of one replica): the
 * reductions only scale, on the device, at wait; ZeRO's halves over one rank. */
static void test_device_local(void **state)
{
    (void)state;
    herd_comm *c;
    assert_herd_ok(herd_comm_device_local_create(herd_backend_cpu(), &c));
    assert_string_equal(c->ops->name, "local");
    herd_comm_destroy(c);
    const herd_backend *be = herd_backend_sim();
    assert_herd_ok(herd_comm_device_local_create(be, &c));
    assert_string_equal(c->ops->name, "mpi-staged");
    assert_int_equal(c->size, 1);
    float h[8] = {1, 2, 3, 4, 5, 6, 7, 8}, *d = be->alloc(sizeof h);
    assert_non_null(d);
    assert_herd_ok(be->memcpy_h2d(d, h, sizeof h));
    assert_herd_ok(c->ops->allreduce_start(c, d + 4, 4, 0.5f, HERD_WIRE_FP16, "bucket 0"));
    int counts[1] = {4};
    assert_herd_ok(c->ops->reduce_scatter_start(c, d, counts, 0.25f, HERD_WIRE_FP32, true, "b1"));
    assert_herd_ok(c->ops->wait_ticket(c, c->ops->ticket(c)));
    assert_herd_ok(c->ops->allgather_start(c, d, counts, "b1"));
    assert_herd_ok(c->ops->wait_all(c));
    assert_herd_ok(be->memcpy_d2h(h, d, sizeof h));
    for (int i = 0; i < 8; i++) /* the wire of one rank is no wire: scaled in fp32 */
        assert_true(h[i] == (float)(i + 1) * (i < 4 ? 0.25f : 0.5f));
    be->free(d);
    herd_comm_destroy(c); /* and the local communicator it made */
}

/* On a GPU host built with NCCL: ZeRO's halves and the tickets over a communicator of
 * one rank run NCCL's grouped calls, the scale kernel and the ticket events for real
 * (several ranks need several GPUs: docs/gpu.md). Skipped elsewhere. */
static void test_nccl_one_rank(void **state)
{
    (void)state;
    if (!herd_have_nccl() || !herd_backend_cuda_visible())
        skip();
    const herd_backend *be = herd_backend_cuda();
    assert_non_null(be);
    herd_comm *local, *c;
    assert_herd_ok(herd_comm_local_create(&local));
    assert_herd_ok(herd_comm_nccl_create(local, &c));
    float h[8] = {1, 2, 3, 4, 5, 6, 7, 8}, *d = be->alloc(sizeof h);
    assert_non_null(d);
    assert_herd_ok(be->memcpy_h2d(d, h, sizeof h));
    assert_int_equal(c->ops->ticket(c), 0);
    int counts[1] = {4};
    assert_herd_ok(c->ops->reduce_scatter_start(c, d, counts, 0.5f, HERD_WIRE_FP32, true, "b1"));
    assert_herd_ok(c->ops->reduce_scatter_start(c, d + 4, counts, 0.25f, HERD_WIRE_FP16, false, "b0"));
    assert_int_equal(c->ops->ticket(c), 2);
    assert_herd_ok(c->ops->wait_ticket(c, 1));
    assert_herd_ok(c->ops->allgather_start(c, d, counts, "b1"));
    assert_herd_ok(c->ops->wait_ticket(c, c->ops->ticket(c)));
    assert_herd_ok(be->memcpy_d2h(h, d, sizeof h)); /* ordered after the compute stream */
    for (int i = 0; i < 8; i++)
        assert_true(h[i] == (float)(i + 1) * (i < 4 ? 0.5f : 0.25f));
    assert_herd_ok(c->ops->wait_all(c));
    herd_comm *g = NULL;
    assert_int_equal(c->ops->split(c, 0, 0, "group", &g), HERD_ERR_UNSUPPORTED); /* local */
    assert_null(g);
    be->free(d);
    herd_comm_destroy(c);
    herd_comm_destroy(local);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_staged_reduction),
        cmocka_unit_test(test_device_choice),
        cmocka_unit_test(test_device_local),
        cmocka_unit_test(test_nccl_one_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
