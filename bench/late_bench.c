/*
 * Whom a late rank holds back: every rank's own MPI_Bcast time while one
 * rank enters each broadcast late.
 *
 *   late_bench BYTES LATE_RANK LATE_US ROUNDS
 *
 * Each round all ranks meet in a barrier, rank LATE_RANK sleeps LATE_US µs,
 * and every rank times its own MPI_Bcast of BYTES from rank 0 (the late
 * rank's time counts from the barrier, so it includes its lateness). Rank 0
 * prints one line per round, each rank's time in ms in rank order:
 *
 *   round R ms: T0 T1 ... Tp-1
 *
 * bcast_bench times every target at the root, which a late successor holds
 * back; here each rank's time is its own.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 5) {
        if (rank == 0) fprintf(stderr, "usage: late_bench BYTES LATE_RANK LATE_US ROUNDS\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t n = strtoull(argv[1], NULL, 0);
    int late = atoi(argv[2]), late_us = atoi(argv[3]), rounds = atoi(argv[4]);
    if (n > (size_t) 2147483647 || late < 1 || late >= size || late_us < 0) {
        if (rank == 0) fprintf(stderr, "late_bench: BYTES up to 2^31 - 1, LATE_RANK 1 .. p-1\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *buf = malloc(n ? n : 1);
    double *times = malloc(sizeof(double) * (size_t) size);
    memset(buf, rank, n);
    for (int r = 0; r < rounds; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == late) usleep((useconds_t) late_us);
        MPI_Bcast(buf, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD);
        double ms = (MPI_Wtime() - t0) * 1e3;
        MPI_Gather(&ms, 1, MPI_DOUBLE, times, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("round %d ms:", r);
            for (int i = 0; i < size; i++) printf(" %.1f", times[i]);
            printf("\n");
            fflush(stdout);
        }
    }
    free(times);
    free(buf);
    MPI_Finalize();
    return 0;
}
