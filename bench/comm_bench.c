/*
 * Communicator benchmark: what creating and freeing a communicator costs,
 * the broadcasts on it included.
 *
 *   comm_bench [--rounds R] [--bcasts B]
 *
 * Each of R rounds (default 1000) duplicates MPI_COMM_WORLD, makes B
 * broadcasts of one int on the duplicate from rank 0 (default 0), and frees
 * it. Every component selected for a communicator (ipmc's comm_query and
 * module_enable, its agreement on a multicast group where its broadcasts may
 * multicast) runs once per round.
 *
 * Output on rank 0, one line: the rounds, the broadcasts per round and the
 * mean time of a round in µs, from a barrier before the first to a barrier
 * after the last.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rounds = 1000, bcasts = 0, rank, bad = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--rounds") && v > 0) {
            rounds = v;
        } else if (!strcmp(argv[i], "--bcasts") && v >= 0) {
            bcasts = v;
        } else {
            fprintf(stderr, "comm_bench: bad option %s %s\n", argv[i], argv[i + 1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = MPI_Wtime();
    for (int r = 0; r < rounds; r++) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        for (int b = 0; b < bcasts; b++) {
            int value = rank == 0 ? r + b : -1;
            MPI_Bcast(&value, 1, MPI_INT, 0, dup);
            bad += value != r + b;
        }
        MPI_Comm_free(&dup);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double us = (MPI_Wtime() - start) / rounds * 1e6;
    int all_bad = 0;
    MPI_Reduce(&bad, &all_bad, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("comm_bench: rounds=%d bcasts=%d us_per_round=%.1f wrong=%d\n", rounds, bcasts, us,
               all_bad);
    }
    MPI_Finalize();
    return all_bad != 0;
}
