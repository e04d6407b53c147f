/*
 * Horovod's Min, Max and Product over MPI (herd_dist_allreduce_op_start): MPI's own
 * MPI_MIN, MPI_MAX and MPI_PROD on the communication thread, in int-sized pieces.
 *
 * Floats are not compared as floats. MPI_MIN and MPI_MAX compare with < and >, so a NaN
 * is kept or dropped by where it sits in the reduction, and ranks' results could differ
 * from what the user asked for without a word. Each value instead becomes an integer key
 * whose order is the floats' (-0 below +0), with every NaN made the key that wins: the
 * largest for a max, the smallest for a min. The integers reduce exactly, and the key
 * turns back into its float afterwards (a NaN as the quiet NaN).
 */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "dist/comm_mpi_internal.h"

static MPI_Datatype elem_datatype(herd_dtype t)
{
    switch (t) {
    case HERD_DTYPE_F32: return MPI_FLOAT;
    case HERD_DTYPE_F64: return MPI_DOUBLE;
    case HERD_DTYPE_I8: return MPI_INT8_T;
    case HERD_DTYPE_U8: return MPI_UINT8_T;
    case HERD_DTYPE_I16: return MPI_INT16_T;
    case HERD_DTYPE_I32: return MPI_INT32_T;
    default: return MPI_INT64_T;
    }
}

size_t comm_mpi_elem_size(herd_dtype t)
{
    switch (t) {
    case HERD_DTYPE_I8:
    case HERD_DTYPE_U8: return 1;
    case HERD_DTYPE_F16:
    case HERD_DTYPE_BF16:
    case HERD_DTYPE_I16: return 2;
    case HERD_DTYPE_F32:
    case HERD_DTYPE_I32: return 4;
    default: return 8;
    }
}

/* The order-keeping key of a float's bits and back (the same map both ways: negative
 * floats' magnitude bits flipped, so larger magnitudes sort lower). */
static int32_t key32(int32_t bits) { return bits < 0 ? bits ^ INT32_MAX : bits; }
static int64_t key64(int64_t bits) { return bits < 0 ? bits ^ INT64_MAX : bits; }

/* x[0..n) of floats to keys (to_keys) or keys back to floats; nan_key is what every NaN
 * becomes: INT_MAX for a max, INT_MIN for a min (no float maps there). */
static void convert_f32(void *x, size_t n, bool to_keys, bool is_max)
{
    const int32_t nan_key = is_max ? INT32_MAX : INT32_MIN, quiet_nan = 0x7fc00000;
    for (size_t i = 0; i < n; i++) {
        int32_t v;
        memcpy(&v, (char *)x + 4 * i, 4);
        if (to_keys) {
            bool nan = (v & INT32_MAX) > 0x7f800000;
            v = nan ? nan_key : key32(v);
        } else {
            v = v == nan_key ? quiet_nan : key32(v);
        }
        memcpy((char *)x + 4 * i, &v, 4);
    }
}

static void convert_f64(void *x, size_t n, bool to_keys, bool is_max)
{
    const int64_t nan_key = is_max ? INT64_MAX : INT64_MIN, quiet_nan = 0x7ff8000000000000LL;
    for (size_t i = 0; i < n; i++) {
        int64_t v;
        memcpy(&v, (char *)x + 8 * i, 8);
        if (to_keys) {
            bool nan = (v & INT64_MAX) > 0x7ff0000000000000LL;
            v = nan ? nan_key : key64(v);
        } else {
            v = v == nan_key ? quiet_nan : key64(v);
        }
        memcpy((char *)x + 8 * i, &v, 8);
    }
}

int comm_mpi_reduce_elements(comm_mpi *m, const mpi_op *op)
{
    bool keys = op->reduce != HERD_REDUCE_PRODUCT &&
                (op->elem == HERD_DTYPE_F32 || op->elem == HERD_DTYPE_F64);
    bool is_max = op->reduce == HERD_REDUCE_MAX;
    MPI_Datatype type = !keys ? elem_datatype(op->elem)
                        : op->elem == HERD_DTYPE_F32 ? MPI_INT32_T : MPI_INT64_T;
    MPI_Op mpi_op = op->reduce == HERD_REDUCE_MIN ? MPI_MIN : is_max ? MPI_MAX : MPI_PROD;
    size_t elem = comm_mpi_elem_size(op->elem);
    int rc = MPI_SUCCESS;
    for (size_t off = 0; off < op->n && rc == MPI_SUCCESS; off += COMM_MPI_MAX_PIECE) {
        size_t n = op->n - off < COMM_MPI_MAX_PIECE ? op->n - off : COMM_MPI_MAX_PIECE;
        char *x = (char *)op->data + off * elem;
        if (keys)
            (elem == 4 ? convert_f32 : convert_f64)(x, n, true, is_max);
        MPI_Request req;
        rc = MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, type, mpi_op, m->world, &req);
        if (rc == MPI_SUCCESS)
            rc = comm_mpi_wait_request(m, &req);
        if (keys) /* back even after a failure: the caller's buffer holds its floats */
            (elem == 4 ? convert_f32 : convert_f64)(x, n, false, is_max);
    }
    return rc;
}
