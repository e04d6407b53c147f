/* MPI_Allreduce against MPI_Iallreduce polled with MPI_Test (what herd's communication
 * thread does), in place, float sum, without herd: how much of herd's gap to
 * MPI_Allreduce is Open MPI's non-blocking collective itself.
 * Build: mpicc -O2 bench/bench_iallreduce.c -o /tmp/bench_iallreduce
 * Run:   mpirun -np 2 /tmp/bench_iallreduce */
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

int main(int argc, char **argv)
{
    int provided, rank;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    float *buf = calloc((size_t)1 << 24, sizeof *buf);
    if (rank == 0)
        printf("%12s %16s %18s %8s\n", "bytes", "Allreduce(us)", "Iallreduce(us)", "ratio");
    for (int count = 2; count <= (1 << 24); count *= 8) {
        int iters = count >= (1 << 20) ? 10 : 50;
        time_per_call(buf, count, 5, 1); /* warm-up */
        double blocking = time_per_call(buf, count, iters, 1);
        time_per_call(buf, count, 5, 0);
        double polled = time_per_call(buf, count, iters, 0);
        if (rank == 0)
            printf("%12zu %16.2f %18.2f %8.2f\n", (size_t)count * sizeof(float), 1e6 * blocking,
                   1e6 * polled, blocking / polled);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
