/*
 * Broadcasts and allgathers whose buffers lie in a GPU's memory, allocated
 * and copied through Open MPI 5.0's accelerator framework as a program
 * would through CUDA (under the tests, the "fakegpu" component, whose
 * memory the host cannot touch directly).
 *
 *   gpu_bcast SIZES
 *
 * For each size in the comma-separated list, in bytes: an MPI_Bcast from
 * every root in turn, an MPI_Ibcast, and an MPI_Allgather of that many
 * bytes per rank. Every rank checks every byte (copied back to the host);
 * prints "gpu_bcast: PASS" on rank 0.
 */
#include "opal_config.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/accelerator/accelerator.h"

static void to_device(void *dev, const void *host, size_t n)
{
    if (OPAL_SUCCESS != opal_accelerator.mem_copy(0, MCA_ACCELERATOR_NO_DEVICE_ID, dev, host, n,
                                                  MCA_ACCELERATOR_TRANSFER_HTOD)) {
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

static void to_host(void *host, const void *dev, size_t n)
{
    if (OPAL_SUCCESS != opal_accelerator.mem_copy(MCA_ACCELERATOR_NO_DEVICE_ID, 0, host, dev, n,
                                                  MCA_ACCELERATOR_TRANSFER_DTOH)) {
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
}

static unsigned char expected(int call, int from, size_t i)
{
    return (unsigned char) (i * 7 + (size_t) from * 29 + (size_t) call * 101);
}

/* The bytes of `host` (n long) that are not call `call`'s from `from`. */
static long wrong(const unsigned char *host, size_t n, int call, int from)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += host[i] != expected(call, from, i);
    }
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t sizes[16], n_sizes = 0, most = 1;
    for (char *s = argc > 1 ? argv[1] : "65536"; *s && n_sizes < 16;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > (1 << 26)) {
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        sizes[n_sizes++] = (size_t) v;
        most = (size_t) v > most ? (size_t) v : most;
        s = *end == ',' ? end + 1 : end;
    }
    uint64_t flags;
    int dev_id;
    unsigned char *dev = NULL, *host = malloc(most * (size_t) size);
    if (NULL == host
        || OPAL_SUCCESS != opal_accelerator.mem_alloc(0, (void **) &dev, most * (size_t) size)
        || opal_accelerator.check_addr(dev, &dev_id, &flags) <= 0) {
        printf("gpu_bcast: no device memory on rank %d\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long bad = 0;
    int call = 0;
    for (size_t k = 0; k < n_sizes; k++) {
        size_t n = sizes[k];
        for (int root = 0; root < size; root++, call++) {
            for (size_t i = 0; i < n; i++) {
                host[i] = rank == root ? expected(call, root, i) : 0xEE;
            }
            to_device(dev, host, n);
            MPI_Bcast(dev, (int) n, MPI_BYTE, root, MPI_COMM_WORLD);
            to_host(host, dev, n);
            bad += wrong(host, n, call, root);
        }
        for (size_t i = 0; i < n; i++) {
            host[i] = rank == 0 ? expected(call, 0, i) : 0xEE;
        }
        to_device(dev, host, n);
        MPI_Request req;
        MPI_Ibcast(dev, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        to_host(host, dev, n);
        bad += wrong(host, n, call++, 0);
        for (int r = 0; r < size; r++) {
            for (size_t i = 0; i < n; i++) {
                host[(size_t) r * n + i] = r == rank ? expected(call, r, i) : 0xEE;
            }
        }
        to_device(dev, host, n * (size_t) size);
        MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dev, (int) n, MPI_BYTE, MPI_COMM_WORLD);
        to_host(host, dev, n * (size_t) size);
        for (int r = 0; r < size; r++) {
            bad += wrong(host + (size_t) r * n, n, call, r);
        }
        call++;
    }
    long all = 0;
    MPI_Reduce(&bad, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (0 == rank) {
        printf("gpu_bcast: %s (%ld bytes wrong)\n", 0 == all ? "PASS" : "FAIL", all);
    }
    opal_accelerator.mem_release(0, dev);
    free(host);
    MPI_Finalize();
    return 0 == all ? 0 : 1;
}
