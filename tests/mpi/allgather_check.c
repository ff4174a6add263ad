/*
 * Checks every byte that MPI_Allgather delivers, on every rank: blocks of
 * many sizes (0 included), of bytes, of ints, of a strided derived datatype
 * received as ints, in place, on MPI_COMM_WORLD and a duplicate, and
 * repeated back to back. With --v 1, MPI_Allgatherv instead: blocks of a
 * different size on every rank (an empty one among them), placed in reverse
 * rank order with gaps that must stay untouched, of bytes, of ints, in place.
 *
 *   allgather_check [--max-bytes N] [--repeat R] [--strided 0|1] [--v 0|1]
 *
 * --max-bytes  largest block per rank (default 65536)
 * --repeat     calls of each size and kind (default 3)
 * --strided    0: leave out the strided send type (default 1; Open MPI 5.0.7's
 *              han delivers wrong bytes there on hosts of several ranks)
 *
 * Prints "allgather_check: comm=NAME calls=N" per communicator on rank 0 and
 * "allgather_check: PASS" when every block was right on every rank; exits
 * non-zero at the first wrong byte.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int max_bytes = 65536, repeat = 3, with_strided = 1, varying_counts = 0;

/* The byte at k of rank r's block in call c. */
static unsigned char pattern(int c, int r, long k)
{
    return (unsigned char) (c * 31 + r * 7 + k * 13 + (k >> 8));
}

static void fail(MPI_Comm comm, const char *kind, int call, int block, long at)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    fprintf(stderr, "allgather_check: FAIL rank %d: %s call %d, block %d, byte %ld wrong\n", rank,
            kind, call, block, at);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Contiguous blocks of `len` bytes (as MPI_BYTE, or as ints when `ints`),
   or in place. */
static void contiguous(MPI_Comm comm, int call, long len, int ints, int in_place)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    if (ints) {
        len -= len % sizeof(int);
    }
    unsigned char *send = malloc(len + 1), *recv = malloc(len * size + 1);
    for (long k = 0; k < len; ++k) {
        send[k] = pattern(call, rank, k);
    }
    memset(recv, 0xEE, len * size + 1);
    if (in_place) {
        memcpy(recv + len * rank, send, len);
    }
    MPI_Datatype type = ints ? MPI_INT : MPI_BYTE;
    int count = (int) (ints ? len / sizeof(int) : len);
    MPI_Allgather(in_place ? MPI_IN_PLACE : send, count, type, recv, count, type, comm);
    for (int r = 0; r < size; ++r) {
        for (long k = 0; k < len; ++k) {
            if (recv[len * r + k] != pattern(call, r, k)) {
                fail(comm, in_place ? "in place" : ints ? "ints" : "bytes", call, r, k);
            }
        }
    }
    if (recv[len * size] != 0xEE) {
        fail(comm, "past the end", call, size, 0);
    }
    free(send);
    free(recv);
}

/* Each rank sends `n` ints out of every other one (a vector type) and every
   rank receives them packed as ints. */
static void strided(MPI_Comm comm, int call, int n)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int *send = malloc(sizeof(int) * (2 * n + 1)), *recv = malloc(sizeof(int) * (n * size + 1));
    for (int k = 0; k < 2 * n; ++k) {
        send[k] = k % 2 ? -1 : call * 1000003 + rank * 1009 + k / 2;
    }
    MPI_Datatype vec;
    MPI_Type_vector(n, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    MPI_Allgather(send, 1, vec, recv, n, MPI_INT, comm);
    MPI_Type_free(&vec);
    for (int r = 0; r < size; ++r) {
        for (int k = 0; k < n; ++k) {
            if (recv[n * r + k] != call * 1000003 + r * 1009 + k) {
                fail(comm, "strided", call, r, k);
            }
        }
    }
    free(send);
    free(recv);
}

/* MPI_Allgatherv of blocks of about `len` bytes, different on every rank
   (rank 1's empty), as bytes or as ints, placed in reverse rank order with
   a gap of 3 elements after each block; or in place. */
static void varying(MPI_Comm comm, int call, long len, int ints, int in_place)
{
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int elem = ints ? (int) sizeof(int) : 1, gap = 3;
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
    long at = 0;
    for (int r = size - 1; r >= 0; --r) {
        counts[r] = r == 1 ? 0 : (int) ((len / (r + 1) + r) / elem);
        displs[r] = (int) at;
        at += counts[r] + gap;
    }
    long bytes = at * elem;
    unsigned char *send = malloc(counts[rank] * (long) elem + 1), *recv = malloc(bytes + 1);
    for (long k = 0; k < counts[rank] * (long) elem; ++k) {
        send[k] = pattern(call, rank, k);
    }
    memset(recv, 0xEE, bytes + 1);
    if (in_place) {
        memcpy(recv + (long) displs[rank] * elem, send, counts[rank] * (long) elem);
    }
    MPI_Datatype type = ints ? MPI_INT : MPI_BYTE;
    MPI_Allgatherv(in_place ? MPI_IN_PLACE : send, counts[rank], type, recv, counts, displs, type,
                   comm);
    const char *kind = in_place ? "allgatherv in place" : ints ? "allgatherv ints" : "allgatherv";
    for (int r = 0; r < size; ++r) {
        unsigned char *block = recv + (long) displs[r] * elem;
        for (long k = 0; k < counts[r] * (long) elem; ++k) {
            if (block[k] != pattern(call, r, k)) {
                fail(comm, kind, call, r, k);
            }
        }
        for (long k = 0; k < gap * (long) elem; ++k) {
            if (block[counts[r] * (long) elem + k] != 0xEE) {
                fail(comm, "allgatherv gap", call, r, k);
            }
        }
    }
    free(send);
    free(recv);
    free(counts);
    free(displs);
}

static long check(MPI_Comm comm)
{
    long calls = 0;
    if (varying_counts) {
        for (long len = 0; len <= max_bytes; len = len ? len * 4 + 3 : 1) {
            for (int i = 0; i < repeat; ++i, ++calls) {
                varying(comm, (int) calls, len, 0, 0);
            }
            varying(comm, (int) calls++, len, 1, 0);
            varying(comm, (int) calls++, len, 0, 1);
        }
        return calls;
    }
    for (long len = 0; len <= max_bytes; len = len ? len * 4 + 3 : 1) {
        for (int i = 0; i < repeat; ++i, ++calls) {
            contiguous(comm, (int) calls, len, 0, 0);
        }
        contiguous(comm, (int) calls++, len, 1, 0);
        contiguous(comm, (int) calls++, len, 0, 1);
        if (with_strided) {
            strided(comm, (int) calls++, (int) (len / sizeof(int)) + 1);
        }
    }
    return calls;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-bytes")) {
            max_bytes = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--repeat")) {
            repeat = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--strided")) {
            with_strided = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--v")) {
            varying_counts = atoi(argv[i + 1]);
        } else {
            fprintf(stderr, "allgather_check: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_name(dup, "dup");
    long world = check(MPI_COMM_WORLD), other = check(dup);
    MPI_Comm_free(&dup);
    if (rank == 0) {
        printf("allgather_check: comm=MPI_COMM_WORLD calls=%ld\n", world);
        printf("allgather_check: comm=dup calls=%ld\n", other);
        printf("allgather_check: PASS\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
