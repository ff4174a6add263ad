/*
 * Ranks whose kept groups drifted apart: each process keeps the groups of
 * freed communicators for later ones of the same processes, a bounded
 * number in all (coll_ipmc_keep_freed), so communicators that only some
 * ranks belong to push those ranks' older groups out while the other
 * ranks keep theirs.
 *
 *   kept_apart ROUNDS EPOCHS
 *
 * First ROUNDS duplicates of MPI_COMM_WORLD, one after another; then
 * EPOCHS times: ROUNDS communicators of the first 3 ranks only
 * (MPI_Comm_split; the others get none), live at once, and 3 * ROUNDS
 * duplicates of MPI_COMM_WORLD again, one after another. Each
 * communicator makes 2 broadcasts of 4,000 bytes from changing roots,
 * every byte checked, and is freed.
 *
 * Prints "kept_apart: PASS" (or FAIL, with a non-zero exit) on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define BYTES 4000

static long wrong = 0;

static void bcasts(MPI_Comm comm, int round)
{
    unsigned char buf[BYTES];
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int b = 0; b < 2; b++) {
        int root = (round + b) % size;
        for (int i = 0; i < BYTES; i++) {
            buf[i] = rank == root ? (unsigned char) (i * 13 + round + b) : 0;
        }
        MPI_Bcast(buf, BYTES, MPI_BYTE, root, comm);
        for (int i = 0; i < BYTES; i++) {
            wrong += buf[i] != (unsigned char) (i * 13 + round + b);
        }
    }
}

static void world_rounds(int rounds, int first)
{
    for (int r = first; r < first + rounds; r++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        bcasts(c, r);
        MPI_Comm_free(&c);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rounds = argc == 3 ? atoi(argv[1]) : 0;
    int epochs = argc == 3 ? atoi(argv[2]) : 0;
    if (rounds <= 0 || epochs <= 0) {
        if (rank == 0) {
            fprintf(stderr, "usage: kept_apart ROUNDS EPOCHS\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    world_rounds(rounds, 0);
    MPI_Comm *part = malloc(rounds * sizeof *part);
    for (int e = 0; e < epochs; e++) {
        /* Live at once, so that each draws a group of its own. */
        for (int r = 0; r < rounds; r++) {
            MPI_Comm_split(MPI_COMM_WORLD, rank < 3 ? 0 : MPI_UNDEFINED, rank, &part[r]);
            if (part[r] != MPI_COMM_NULL) {
                bcasts(part[r], r);
            }
        }
        for (int r = 0; r < rounds; r++) {
            if (part[r] != MPI_COMM_NULL) {
                MPI_Comm_free(&part[r]);
            }
        }
        world_rounds(3 * rounds, rounds * (1 + 3 * e));
    }
    free(part);
    long all = 0;
    MPI_Reduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("kept_apart: %s (%ld bytes wrong)\n", all == 0 ? "PASS" : "FAIL", all);
        fflush(stdout);
    }
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
