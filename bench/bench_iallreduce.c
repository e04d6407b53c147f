/* MPI_Allreduce against MPI_Iallreduce polled with MPI_Test (what herd's communication
 * thread does), in place, float sum, without herd: how much of herd's gap to
 * MPI_Allreduce is Open MPI's non-blocking collective itself, and what transport
 * settings (e.g. --mca btl_vader_single_copy_mechanism none) do to both.
 * Build: mpicc -O2 bench/bench_iallreduce.c -o /tmp/bench_iallreduce
 * Run:   mpirun -np 2 --bind-to core /tmp/bench_iallreduce [BYTES...]
 *        (default: 8 B to 64 MiB by factors of 8; each the best of 5 rounds) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static double time_per_call(float *buf, int count, int iters, int blocking)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (blocking) {
            MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            continue;
        }
        MPI_Request req;
        int done = 0;
        MPI_Iallreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        while (!done)
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    }
    return (MPI_Wtime() - start) / iters;
}

/* The best of 5 rounds: the least disturbed by the rest of the machine. */
static double best_of_rounds(float *buf, int count, int iters, int blocking)
{
    double best = 1e30;
    time_per_call(buf, count, 5, blocking); /* warm-up */
    for (int round = 0; round < 5; round++) {
        double t = time_per_call(buf, count, iters, blocking);
        best = t < best ? t : best;
    }
    return best;
}

static void run(float *buf, int count, int rank)
{
    int iters = count >= (1 << 20) ? 10 : 50;
    double blocking = best_of_rounds(buf, count, iters, 1);
    double polled = best_of_rounds(buf, count, iters, 0);
    if (rank == 0)
        printf("%12zu %16.2f %18.2f %8.2f\n", (size_t)count * sizeof(float), 1e6 * blocking,
               1e6 * polled, blocking / polled);
}

int main(int argc, char **argv)
{
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int max_count = 1 << 24;
    for (int i = 1; i < argc; i++) {
        long bytes = atol(argv[i]);
        if (bytes < 4 || bytes / 4 > max_count) {
            if (rank == 0)
                fprintf(stderr, "sizes are bytes from 4 to %d\n", 4 * max_count);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    float *buf = calloc((size_t)max_count, sizeof *buf);
    if (rank == 0)
        printf("%12s %16s %18s %8s\n", "bytes", "Allreduce(us)", "Iallreduce(us)", "ratio");
    if (argc > 1)
        for (int i = 1; i < argc; i++)
            run(buf, (int)(atol(argv[i]) / 4), rank);
    else
        for (int count = 2; count <= max_count; count *= 8)
            run(buf, count, rank);
    free(buf);
    MPI_Finalize();
    return 0;
}
