/*
 * A seeded random mix of the collectives ipmc serves, the same sequence on
 * every rank, every byte checked:
 *
 *   mixed_check SEED STEPS
 *
 * Each step picks, from a generator seeded with SEED, one of three
 * communicators (MPI_COMM_WORLD and two that change), a root and a size
 * (0 B … 3 MB), and one of: MPI_Bcast; MPI_Ibcast, up to 4 left outstanding
 * across the communicators and waited for together; a persistent broadcast
 * started 3 times; MPI_Barrier; MPI_Allgather of a block per rank; the
 * communicator freed (after its outstanding broadcasts) and made again by
 * MPI_Comm_dup of MPI_COMM_WORLD, or by MPI_Comm_split into even and odd
 * ranks in reverse order.
 *
 * Prints "mixed_check: PASS" (or FAIL, with a non-zero exit) on rank 0, and
 * each wrong result on stderr.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION < 5
#include <mpi-ext.h>
#define BCAST_INIT MPIX_Bcast_init
#else
#define BCAST_INIT MPI_Bcast_init
#endif

#define COMMS 3
#define OUTSTANDING 4

static uint64_t state;

static uint32_t draw(void)
{
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t) (state >> 33);
}

static size_t draw_size(void)
{
    static const size_t sizes[] = {0,     1,     7,      100,    1000,    2048,     4096,   6000,
                                   16384, 40000, 65536, 100000, 262144, 1 << 20, 3000000};
    return sizes[draw() % (sizeof sizes / sizeof *sizes)];
}

static void fill(unsigned char *b, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        b[i] = (unsigned char) (i * 31 + seed);
    }
}

static int intact(const unsigned char *b, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] != (unsigned char) (i * 31 + seed)) {
            return 0;
        }
    }
    return 1;
}

static struct {
    MPI_Request request;
    unsigned char *buf;
    size_t n;
    uint32_t seed;
} pending[OUTSTANDING];
static int npending;
static int wrong;

static void report(int step, const char *what, size_t n)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "mixed_check: rank %d step %d: %s of %zu bytes wrong\n", rank, step, what, n);
    wrong++;
}

/* Waits for every outstanding MPI_Ibcast and checks its bytes. */
static void wait_pending(int step)
{
    for (int i = 0; i < npending; i++) {
        MPI_Wait(&pending[i].request, MPI_STATUS_IGNORE);
        if (!intact(pending[i].buf, pending[i].n, pending[i].seed)) {
            report(step, "ibcast", pending[i].n);
        }
        free(pending[i].buf);
    }
    npending = 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 3) {
        if (rank == 0) {
            fprintf(stderr, "usage: mixed_check SEED STEPS\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    state = strtoull(argv[1], NULL, 10);
    int steps = atoi(argv[2]);
    MPI_Comm comms[COMMS] = {MPI_COMM_WORLD};
    for (int c = 1; c < COMMS; c++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
    }
    for (int step = 0; step < steps; step++) {
        uint32_t op = draw() % 100, seed = draw();
        int c = draw() % COMMS;
        MPI_Comm comm = comms[c];
        int csize, crank;
        MPI_Comm_size(comm, &csize);
        MPI_Comm_rank(comm, &crank);
        int root = draw() % csize;
        size_t n = draw_size();
        if (op < 60) {
            unsigned char *b = malloc(n + 1);
            if (crank == root) {
                fill(b, n, seed);
            } else {
                memset(b, 0xee, n);
            }
            if (op < 40) {
                MPI_Bcast(b, (int) n, MPI_BYTE, root, comm);
                if (!intact(b, n, seed)) {
                    report(step, "bcast", n);
                }
                free(b);
            } else {
                if (npending == OUTSTANDING) {
                    wait_pending(step);
                }
                pending[npending].buf = b;
                pending[npending].n = n;
                pending[npending].seed = seed;
                MPI_Ibcast(b, (int) n, MPI_BYTE, root, comm, &pending[npending].request);
                npending++;
            }
        } else if (op < 65) {
            unsigned char *b = malloc(n + 1);
            MPI_Request request;
            BCAST_INIT(b, (int) n, MPI_BYTE, root, comm, MPI_INFO_NULL, &request);
            for (uint32_t k = 0; k < 3; k++) {
                if (crank == root) {
                    fill(b, n, seed + k);
                } else {
                    memset(b, 0xee, n);
                }
                MPI_Start(&request);
                MPI_Wait(&request, MPI_STATUS_IGNORE);
                if (!intact(b, n, seed + k)) {
                    report(step, "persistent bcast", n);
                }
            }
            MPI_Request_free(&request);
            free(b);
        } else if (op < 75) {
            MPI_Barrier(comm);
        } else if (op < 85) {
            size_t block = n / 8 + 1;
            if (block > 200000) {
                block = 200000;
            }
            unsigned char *mine = malloc(block), *all = malloc(block * csize);
            fill(mine, block, seed + crank);
            memset(all, 0xee, block * csize);
            MPI_Allgather(mine, (int) block, MPI_BYTE, all, (int) block, MPI_BYTE, comm);
            for (int r = 0; r < csize; r++) {
                if (!intact(all + r * block, block, seed + r)) {
                    report(step, "allgather block", block);
                    break;
                }
            }
            free(mine);
            free(all);
        } else if (c != 0) {
            /* A communicator is freed with nothing of it outstanding. */
            wait_pending(step);
            MPI_Comm_free(&comms[c]);
            if (op < 93) {
                MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
            } else {
                MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &comms[c]);
            }
        }
    }
    wait_pending(steps);
    int all_wrong = 0;
    MPI_Allreduce(&wrong, &all_wrong, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mixed_check: %s (%d wrong)\n", all_wrong ? "FAIL" : "PASS", all_wrong);
    }
    for (int c = 1; c < COMMS; c++) {
        MPI_Comm_free(&comms[c]);
    }
    MPI_Finalize();
    return all_wrong != 0;
}
