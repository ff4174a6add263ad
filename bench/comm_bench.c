/*
 * Communicator benchmark: what creating and freeing a communicator costs,
 * the broadcasts on it included.
 *
 *   comm_bench [--rounds R] [--bcasts B] [--bytes N]
 *
 * Each of R rounds (default 1000) duplicates MPI_COMM_WORLD, makes B
 * broadcasts on the duplicate (default 0), and frees it: with --bytes, of
 * N bytes from rank b % size for the b-th, otherwise of one int from rank
 * 0; every byte checked. Every component selected for a communicator
 * (ipmc's comm_query and module_enable, its agreement on a multicast group
 * where its broadcasts may multicast, its measurement of each size class)
 * runs once per round.
 *
 * Output on rank 0, one line: the rounds, the broadcasts per round, their
 * bytes, the mean time of a round in µs, from a barrier before the first to
 * a barrier after the last, and the slowest rank's mean time in a broadcast
 * call in µs.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rounds = 1000, bcasts = 0, bytes = 0, rank, size, bad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--rounds") && v > 0) {
            rounds = v;
        } else if (!strcmp(argv[i], "--bcasts") && v >= 0) {
            bcasts = v;
        } else if (!strcmp(argv[i], "--bytes") && v > 0) {
            bytes = v;
        } else {
            fprintf(stderr, "comm_bench: bad option %s %s\n", argv[i], argv[i + 1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    unsigned char *buf = malloc(bytes > 0 ? (size_t) bytes : 1);
    double in_bcasts = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int r = 0; r < rounds; r++) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        for (int b = 0; b < bcasts; b++) {
            double entered;
            if (bytes == 0) {
                int value = rank == 0 ? r + b : -1;
                entered = MPI_Wtime();
                MPI_Bcast(&value, 1, MPI_INT, 0, dup);
                in_bcasts += MPI_Wtime() - entered;
                bad += value != r + b;
                continue;
            }
            int root = b % size;
            for (int i = 0; i < bytes; i++) {
                buf[i] = rank == root ? (unsigned char) (i + r + b) : 0;
            }
            entered = MPI_Wtime();
            MPI_Bcast(buf, bytes, MPI_BYTE, root, dup);
            in_bcasts += MPI_Wtime() - entered;
            for (int i = 0; i < bytes; i++) {
                bad += buf[i] != (unsigned char) (i + r + b);
            }
        }
        MPI_Comm_free(&dup);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double us = (MPI_Wtime() - start) / rounds * 1e6;
    int all_bad = 0;
    double slowest = 0;
    MPI_Reduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&in_bcasts, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double per_bcast = bcasts > 0 ? slowest / rounds / bcasts * 1e6 : 0;
        printf("comm_bench: rounds=%d bcasts=%d bytes=%d us_per_round=%.1f us_per_bcast=%.1f "
               "wrong=%d\n",
               rounds, bcasts, bytes > 0 ? bytes : (int) sizeof(int), us, per_bcast, all_bad);
    }
    free(buf);
    MPI_Finalize();
    return all_bad != 0;
}
