/*
 * Persistent broadcasts (MPI_Bcast_init; MPIX_Bcast_init in Open MPI 4.1),
 * checked byte for byte on every rank:
 *
 *   persistent_check [--bytes N] [--rounds R] [--keep 1] [--split-first 1]
 *
 * Made once, on MPI_COMM_WORLD (named "world") and on a duplicate of it
 * ("dup"), then started R times each (default 3), new bytes every round:
 *   plain     N bytes (default 65536) from rank 1 on world: MPI_Start,
 *             then an MPI_Bcast and an MPI_Ibcast on world before the
 *             MPI_Wait;
 *   strided   N bytes as every other int of a vector type that is freed
 *             right after the MPI_Bcast_init, from the last rank on world,
 *             and N bytes from rank 0 on dup, which is freed (the
 *             communicator) right after its MPI_Bcast_init: both begun by
 *             one MPI_Startall and completed by MPI_Test;
 *   empty     0 bytes from rank 0 on world.
 * With --keep 1, the vector type and dup are freed only after the requests:
 * Open MPI's own persistent broadcasts (coll libnbc, 4.1.4 and 5.0.7) crash
 * when either goes first. With --split-first 1, world and dup have an
 * MPI_Barrier before their first persistent broadcast is made (ipmc splits a
 * communicator whose nodes hold several ranks into its two levels at its
 * first blocking collective).
 * Prints "persistent_check: PASS" on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION < 5
#include <mpi-ext.h>
#define BCAST_INIT MPIX_Bcast_init
#else
#define BCAST_INIT MPI_Bcast_init
#endif

static unsigned char pattern(int round, int which, size_t i)
{
    return (unsigned char) ((round * 151 + which * 37 + i * 13 + (i >> 11)) & 0xff);
}

static void fail(const char *what, int round, size_t at)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "persistent_check: FAIL %s rank=%d round=%d at byte %zu\n", what, rank, round,
            at);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* The root fills its bytes with the round's pattern, every other rank with
   zeros; `stride` 2 touches every other int only (the gaps hold 0xee). */
static void fill(unsigned char *buf, size_t n, int stride, int round, int which, int is_root)
{
    size_t k = 0;
    for (size_t i = 0; i < n * stride; i++) {
        int data = stride == 1 || (i / sizeof(int)) % 2 == 0;
        buf[i] = !data ? 0xee : is_root ? pattern(round, which, k) : 0;
        k += data;
    }
}

static void check(const char *what, const unsigned char *buf, size_t n, int stride, int round,
                  int which)
{
    size_t k = 0;
    for (size_t i = 0; i < n * stride; i++) {
        int data = stride == 1 || (i / sizeof(int)) % 2 == 0;
        if (buf[i] != (!data ? 0xee : pattern(round, which, k))) {
            fail(what, round, i);
        }
        k += data;
    }
}

int main(int argc, char **argv)
{
    size_t n = 65536;
    int rounds = 3, keep = 0, split_first = 0, rank, size, wrong = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bytes")) {
            n = strtoul(argv[i + 1], NULL, 10);
        } else if (!strcmp(argv[i], "--rounds")) {
            rounds = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--keep")) {
            keep = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--split-first")) {
            split_first = atoi(argv[i + 1]);
        }
    }
    n -= n % (2 * sizeof(int));
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* A refused MPI_Request_free is reported, not fatal. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_name(MPI_COMM_WORLD, "world");
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_name(dup, "dup");
    if (split_first) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(dup);
    }

    unsigned char *plain = malloc(n), *other = malloc(n), *nb = malloc(n);
    unsigned char *strided = malloc(2 * n), *on_dup = malloc(n);
    char none;
    MPI_Datatype vec;
    MPI_Type_vector((int) (n / sizeof(int)), 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);

    MPI_Request plain_req, pair[2], empty_req, ibcast_req;
    BCAST_INIT(plain, (int) n, MPI_BYTE, 1 % size, MPI_COMM_WORLD, MPI_INFO_NULL, &plain_req);
    BCAST_INIT(strided, 1, vec, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &pair[0]);
    if (!keep) {
        MPI_Type_free(&vec);
    }
    BCAST_INIT(on_dup, (int) n, MPI_BYTE, 0, dup, MPI_INFO_NULL, &pair[1]);
    if (!keep) {
        MPI_Comm_free(&dup);
    }
    BCAST_INIT(&none, 0, MPI_BYTE, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &empty_req);

    for (int round = 0; round < rounds; round++) {
        fill(plain, n, 1, round, 0, rank == 1 % size);
        fill(other, n, 1, round, 1, rank == 0);
        fill(nb, n, 1, round, 2, rank == size - 1);
        MPI_Start(&plain_req);
        MPI_Bcast(other, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD);
        MPI_Ibcast(nb, (int) n, MPI_BYTE, size - 1, MPI_COMM_WORLD, &ibcast_req);
        MPI_Wait(&ibcast_req, MPI_STATUS_IGNORE);
        MPI_Wait(&plain_req, MPI_STATUS_IGNORE);
        check("plain", plain, n, 1, round, 0);
        check("bcast", other, n, 1, round, 1);
        check("ibcast", nb, n, 1, round, 2);

        fill(strided, n, 2, round, 3, rank == size - 1);
        fill(on_dup, n, 1, round, 4, rank == 0);
        MPI_Startall(2, pair);
        for (int done = 0; !done;) {
            MPI_Testall(2, pair, &done, MPI_STATUSES_IGNORE);
        }
        check("strided", strided, n, 2, round, 3);
        check("dup", on_dup, n, 1, round, 4);

        MPI_Start(&empty_req);
        MPI_Wait(&empty_req, MPI_STATUS_IGNORE);
    }
    wrong += MPI_Request_free(&plain_req) != MPI_SUCCESS;
    wrong += MPI_Request_free(&pair[0]) != MPI_SUCCESS;
    wrong += MPI_Request_free(&pair[1]) != MPI_SUCCESS;
    wrong += MPI_Request_free(&empty_req) != MPI_SUCCESS;
    if (keep) {
        MPI_Type_free(&vec);
        MPI_Comm_free(&dup);
    }
    int total;
    MPI_Allreduce(&wrong, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("persistent_check: %s\n", total ? "FAIL (freeing a request)" : "PASS");
    }
    free(plain);
    free(other);
    free(nb);
    free(strided);
    free(on_dup);
    MPI_Finalize();
    return total != 0;
}
