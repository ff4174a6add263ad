/*
 * Communicators of the same processes made while an earlier one still
 * measures, votes or finishes its work, and freed in opposite orders on
 * even and odd ranks: what each takes on from the others (ipmc keeps what
 * a communicator measured and decided for later ones of the same
 * processes, agreed by every rank) may differ from rank to rank at each
 * creation, and every byte must still arrive.
 *
 *   same_processes ROUNDS
 *
 * Each round duplicates MPI_COMM_WORLD as A, makes 10 to 32 broadcasts of
 * 1,000 and 4,096 bytes on A (around where a size class's measurement
 * ends and its vote runs), duplicates MPI_COMM_WORLD as B, makes 12
 * broadcasts of 4,096 bytes on B interleaved with broadcasts on A and
 * barriers on B, and frees A then B on odd ranks, B then A on even ones.
 * Roots change; every byte is checked.
 *
 * Prints "same_processes: PASS" (or FAIL, with a non-zero exit) on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int wrong = 0;

static void bcast(MPI_Comm comm, int bytes, int root, int seed)
{
    unsigned char *buf = malloc(bytes);
    int rank;
    MPI_Comm_rank(comm, &rank);
    for (int i = 0; i < bytes; i++) {
        buf[i] = rank == root ? (unsigned char) (i * 7 + seed) : 0;
    }
    MPI_Bcast(buf, bytes, MPI_BYTE, root, comm);
    for (int i = 0; i < bytes; i++) {
        wrong += buf[i] != (unsigned char) (i * 7 + seed);
    }
    free(buf);
}

int main(int argc, char **argv)
{
    int rank, size, all = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int rounds = argc > 1 ? atoi(argv[1]) : 20;
    for (int r = 0; r < rounds; r++) {
        MPI_Comm a, b;
        MPI_Comm_dup(MPI_COMM_WORLD, &a);
        int n = 10 + (r * 5) % 23;
        for (int i = 0; i < n; i++) {
            bcast(a, i % 3 ? 4096 : 1000, (i + r) % size, i + r);
        }
        MPI_Comm_dup(MPI_COMM_WORLD, &b);
        for (int i = 0; i < 12; i++) {
            bcast(b, 4096, i % size, i);
            if (i % 4 == 0) {
                bcast(a, 4096, 0, i + 1);
            }
            if (i % 5 == 0) {
                MPI_Barrier(b);
            }
        }
        if (rank % 2) {
            MPI_Comm_free(&a);
            MPI_Comm_free(&b);
        } else {
            MPI_Comm_free(&b);
            MPI_Comm_free(&a);
        }
    }
    MPI_Reduce(&wrong, &all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("same_processes: %s wrong=%d\n", all ? "FAIL" : "PASS", all);
    }
    MPI_Finalize();
    return rank == 0 && all != 0;
}
