/*
 * A root that runs broadcasts ahead of another rank, as Open MPI's eager
 * broadcast of small messages allows: each round, rank 1 waits for a token
 * from the root before it enters K broadcasts, which the root makes before
 * it sends the token.
 *
 *   ahead SIZES K [ROUNDS]
 *
 * SIZES is a comma-separated list of message sizes in bytes, taken in turn
 * by the K broadcasts of a round (so that they fall in several size classes,
 * each measured and served by its own algorithm). ROUNDS (default 400 / K)
 * rounds of K broadcasts from rank 0, so that each class has many calls: an
 * automatic choice measures the first ones and agrees on them while the
 * root is ahead. Every rank checks every byte; prints "ahead: PASS" on
 * rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 16

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int sizes[MAX_SIZES], n_sizes = 0, most = 0;
    for (char *s = argc > 1 ? argv[1] : "1024"; *s && n_sizes < MAX_SIZES;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > (1 << 30))
            MPI_Abort(MPI_COMM_WORLD, 2);
        sizes[n_sizes++] = (int)v;
        most = (int)v > most ? (int)v : most;
        s = *end == ',' ? end + 1 : end;
    }
    int k = argc > 2 ? atoi(argv[2]) : 4;
    if (k < 1 || n_sizes == 0)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int rounds = argc > 3 ? atoi(argv[3]) : 400 / k;
    unsigned char *buf = malloc(most);
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 2);
    for (int r = 0; r < rounds; r++) {
        int token = r;
        if (rank == 1)
            MPI_Recv(&token, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int c = 0; c < k; c++) {
            int n = sizes[c % n_sizes];
            unsigned char want = (unsigned char)(r * k + c);
            memset(buf, rank == 0 ? want : (unsigned char)~want, n);
            MPI_Bcast(buf, n, MPI_BYTE, 0, MPI_COMM_WORLD);
            for (int i = 0; i < n; i++)
                if (buf[i] != want) {
                    printf("ahead: FAIL on rank %d, round %d, byte %d of %d\n", rank, r, i, n);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
        }
        if (rank == 0)
            MPI_Send(&token, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ahead: PASS\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
