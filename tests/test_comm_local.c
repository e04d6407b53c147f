/* The single-process communicator and the herd_dist API without a launcher. */
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "herd_config.h"
#include "dist/comm.h"
#include "dist/launcher.h"

static void test_local_collectives(void **state)
{
    (void)state;
    herd_comm *c;
    assert_herd_ok(herd_comm_local_create(&c));
    assert_string_equal(c->ops->name, "local");
    assert_int_equal(c->rank, 0);
    assert_int_equal(c->size, 1);
    assert_int_equal(c->local_rank, 0);
    assert_int_equal(c->local_size, 1);
    assert_true(c->host[0] != '\0');

    float g[6] = {1, 2, 3, 4, 5, 6};
    assert_herd_ok(c->ops->allreduce_start(c, g, 3, 1.0f, HERD_WIRE_FP32, "a"));
    assert_herd_ok(c->ops->allreduce_start(c, g + 3, 3, 0.5f, HERD_WIRE_FP16, "b"));
    assert_herd_ok(c->ops->wait_all(c));
    const float want[6] = {1, 2, 3, 2, 2.5f, 3};
    assert_memory_equal(g, want, sizeof want);

    char buf[4] = "abc";
    assert_herd_ok(c->ops->broadcast(c, buf, sizeof buf, 0));
    assert_string_equal(buf, "abc");
    assert_int_equal(c->ops->broadcast(c, buf, sizeof buf, 1), HERD_ERR_INVALID_ARG);

    double v[2] = {1.5, -2};
    assert_herd_ok(c->ops->allreduce_f64(c, v, 2));
    assert_true(v[0] == 1.5 && v[1] == -2);
    assert_herd_ok(c->ops->allreduce_f64_start(c, v, 2, "metrics"));
    assert_herd_ok(c->ops->wait_all(c));
    assert_true(v[0] == 1.5 && v[1] == -2);
    assert_herd_ok(c->ops->reduce_scatter_f64(c, v, (int[]){2}));
    assert_true(v[0] == 1.5 && v[1] == -2);
    assert_int_equal(c->ops->reduce_scatter_f64(c, v, (int[]){-1}), HERD_ERR_INVALID_ARG);
    float f[2] = {1, 2};
    assert_herd_ok(c->ops->allgatherv_f32(c, f, (int[]){2}));
    assert_true(f[0] == 1 && f[1] == 2);
    assert_int_equal(c->ops->allgatherv_f32(c, f, NULL), HERD_ERR_INVALID_ARG);

    int mine = 42, all = 0;
    assert_herd_ok(c->ops->allgather(c, &mine, &all, sizeof mine));
    assert_int_equal(all, 42);
    assert_herd_ok(c->ops->barrier(c));
    char gathered[4] = "";
    assert_herd_ok(c->ops->gather(c, "xyz", 4, gathered, (size_t[]){4}, 0));
    assert_string_equal(gathered, "xyz");
    assert_int_equal(c->ops->gather(c, "xyz", 4, gathered, (size_t[]){3}, 0), HERD_ERR_INVALID_ARG);
    double samples[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_herd_ok(c->ops->clock_samples(c, 2, samples)); /* no peer: rank 0's rows are zero */
    for (int i = 0; i < 8; i++)
        assert_true(samples[i] == 0);
    c->ops->set_activity(c, "epoch 1 step 3: forward");
    herd_comm_destroy(c);
}

static void test_local_typed_and_p2p(void **state)
{
    (void)state;
    herd_comm *c;
    assert_herd_ok(herd_comm_create_backend("local", NULL, &c));
    uint16_t h[3] = {0x3c00, 0x4000, 0x4200}; /* 1, 2, 3 in half: a sum over one rank */
    assert_herd_ok(c->ops->allreduce_typed_start(c, h, 3, HERD_WIRE_FP16, "h"));
    assert_herd_ok(c->ops->wait_all(c));
    assert_true(h[0] == 0x3c00 && h[1] == 0x4000 && h[2] == 0x4200);

    char out[4] = "xyz", in[4] = "";
    assert_herd_ok(c->ops->sendrecv_start(c, out, sizeof out, 0, in, sizeof in, 0));
    assert_herd_ok(c->ops->wait_all(c));
    assert_string_equal(in, "xyz");
    assert_int_equal(c->ops->sendrecv_start(c, out, 4, 1, NULL, 0, -1), HERD_ERR_INVALID_ARG);
    assert_int_equal(c->ops->sendrecv_start(c, out, 4, 0, NULL, 0, -1), HERD_ERR_INVALID_ARG);
    assert_null(c->ops->time_reference_allreduce); /* nothing to compare with */
    herd_comm_destroy(c);

    assert_int_equal(herd_comm_create_backend("nccl", NULL, &c), HERD_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(herd_last_error(), "--backend mpi"));
    assert_int_equal(herd_comm_create_backend("gloo", NULL, &c), HERD_ERR_INVALID_ARG);
}

static void test_default_without_launcher(void **state)
{
    (void)state;
    static const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "PMIX_RANK",
                                 "SLURM_PROCID", "SLURM_NTASKS"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    assert_false(herd_comm_launched_by_mpi());
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "1", 1);
    assert_false(herd_comm_launched_by_mpi()); /* a one-task srun step is not an MPI job */
    setenv("SLURM_NTASKS", "4", 1);
    assert_true(herd_comm_launched_by_mpi());
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");

    herd_dist *d;
    assert_herd_ok(herd_dist_init(NULL, &d));
    assert_int_equal(herd_dist_rank(d), 0);
    assert_int_equal(herd_dist_size(d), 1);
    assert_int_equal(herd_dist_local_rank(d), 0);
    assert_string_equal(herd_dist_backend(d), "local");
    herd_dist_free(d);
    assert_int_equal(herd_dist_size(NULL), 1);
    assert_string_equal(herd_dist_backend(NULL), "local");
}

static void test_launched_without_mpi_build(void **state)
{
    (void)state;
#if HERD_HAVE_MPI
    tu_skip("checks the build without MPI; this build has MPI");
#else
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    herd_comm *c = NULL;
    assert_int_equal(herd_comm_create_default(NULL, &c), HERD_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(herd_last_error(), "without MPI"));
    unsetenv("OMPI_COMM_WORLD_SIZE");
    assert_int_equal(herd_comm_mpi_create(NULL, &c), HERD_ERR_UNSUPPORTED);
#endif
}

/* MPI sees one rank while the launcher started several: another MPI's launcher. */
static void test_launcher_check(void **state)
{
    (void)state;
    char *ompi[] = {"OMPI_COMM_WORLD_SIZE=2", NULL}, *hydra[] = {"PMI_SIZE=3", NULL},
         *srun2[] = {"SLURM_STEP_NUM_TASKS=2", NULL}, *srun1[] = {"SLURM_STEP_NUM_TASKS=1", NULL},
         *none[] = {"PATH=/usr/bin", NULL};
    assert_int_equal(herd_mpi_launcher_check("MPICH 4.0.2", 1, ompi), HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "herd uses MPICH 4.0.2, but Open MPI's mpirun started "
                                              "it as one of 2 ranks (OMPI_COMM_WORLD_SIZE=2)"));
    assert_non_null(strstr(herd_last_error(), "its own MPI's launcher"));
    assert_int_equal(herd_mpi_launcher_check("Open MPI v4.1.4", 1, hydra), HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "Open MPI v4.1.4, but a PMI launcher (MPICH's Hydra"));
    assert_int_equal(herd_mpi_launcher_check("Open MPI v4.1.4", 1, srun2), HERD_ERR_UNSUPPORTED);
    assert_non_null(strstr(herd_last_error(), "Slurm's srun started it as one of 2 tasks"));
    assert_non_null(strstr(herd_last_error(), "--mpi=pmix"));
    /* Joined (size > 1), one task, or no launcher: nothing to say. */
    assert_herd_ok(herd_mpi_launcher_check("MPICH 4.0.2", 3, hydra));
    assert_herd_ok(herd_mpi_launcher_check("Open MPI v4.1.4", 1, srun1));
    assert_herd_ok(herd_mpi_launcher_check("Open MPI v4.1.4", 1, none));
    assert_herd_ok(herd_mpi_launcher_check(NULL, 1, ompi)); /* no MPI: comm.c says so */
    /* Size unknown (herd doctor): the families are compared; srun fits either. */
    assert_herd_ok(herd_mpi_launcher_check("Open MPI v4.1.4", 0, ompi));
    assert_int_equal(herd_mpi_launcher_check("MPICH 4.0.2", 0, ompi), HERD_ERR_UNSUPPORTED);
    assert_herd_ok(herd_mpi_launcher_check("MPICH 4.0.2", 0, srun2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_local_collectives),
        cmocka_unit_test(test_local_typed_and_p2p),
        cmocka_unit_test(test_default_without_launcher),
        cmocka_unit_test(test_launched_without_mpi_build),
        cmocka_unit_test(test_launcher_check),
    };
    return tu_run(tests, NULL, NULL);
}
