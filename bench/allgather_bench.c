/*
 * Allgather benchmark: the time of one MPI_Allgather of each block size, as
 * OSU's osu_allgather measures it, per rank.
 *
 *   allgather_bench [--sizes S1,S2,...] [--rounds R] [--batch B] [--warmup W]
 *
 * For each block size (bytes per rank; default 1024,4096,65536), after W
 * calls that go unrecorded (default 40: ipmc's automatic choice measures a
 * block size's first 16 calls, then decides during the next 16), each of R
 * rounds (default 50) times B back-to-back calls (default 5) on every rank
 * and records the time divided by B. The first call's blocks are checked on
 * every rank.
 *
 * Output on rank 0, CSV in the form of bcast_bench's (bytes is the block
 * size, target the rank): a header line, one line per size and rank with its
 * median over the rounds (`kind=rank`), and one summary per size
 * (`kind=summary`) with the largest and smallest of those medians;
 * simple_max_us is the slowest rank's mean.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipmc_counters.h"

static int compare(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static void bench(size_t len, int rounds, int batch, int warmup, int rank, int size)
{
    unsigned char *send = malloc(len + 1), *recv = malloc(len * size + 1);
    for (size_t k = 0; k < len; ++k) {
        send[k] = (unsigned char) (rank * 7 + k);
    }
    for (int i = 0; i < warmup; ++i) {
        MPI_Allgather(send, (int) len, MPI_BYTE, recv, (int) len, MPI_BYTE, MPI_COMM_WORLD);
        for (int r = 0; i == 0 && r < size; ++r) {
            for (size_t k = 0; k < len; ++k) {
                if (recv[len * r + k] != (unsigned char) (r * 7 + k)) {
                    fprintf(stderr, "allgather_bench: block %d wrong at byte %zu\n", r, k);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            }
        }
    }
    double *t = malloc(sizeof(double) * rounds), sum = 0;
    for (int r = 0; r < rounds; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int b = 0; b < batch; ++b) {
            MPI_Allgather(send, (int) len, MPI_BYTE, recv, (int) len, MPI_BYTE, MPI_COMM_WORLD);
        }
        t[r] = (MPI_Wtime() - start) / batch;
        sum += t[r];
    }
    qsort(t, rounds, sizeof(double), compare);
    double mine[2] = {t[rounds / 2], sum / rounds};
    double *all = rank == 0 ? malloc(sizeof(double) * 2 * size) : NULL;
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double hi = 0, lo = 1e30, mean_hi = 0;
        for (int r = 0; r < size; ++r) {
            double median = all[2 * r], mean = all[2 * r + 1];
            printf("rank,%d,%zu,%d,%.1f,,,,\n", size, len, r, median * 1e6);
            hi = median > hi ? median : hi;
            lo = median < lo ? median : lo;
            mean_hi = mean > mean_hi ? mean : mean_hi;
        }
        printf("summary,%d,%zu,,,%.1f,%.1f,%.3f,%.1f\n", size, len, hi * 1e6, lo * 1e6, hi / lo,
               mean_hi * 1e6);
        fflush(stdout);
    }
    free(all);
    free(t);
    free(send);
    free(recv);
}

int main(int argc, char **argv)
{
    int rounds = 50, batch = 5, warmup = 40;
    char sizes[1024] = "1024,4096,65536";
    MPI_Init(&argc, &argv);
    ipmc_counters_start(&(MPI_Comm){MPI_COMM_WORLD});
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--sizes")) {
            snprintf(sizes, sizeof sizes, "%s", argv[i + 1]);
        } else if (!strcmp(argv[i], "--rounds") && v > 0) {
            rounds = v;
        } else if (!strcmp(argv[i], "--batch") && v > 0) {
            batch = v;
        } else if (!strcmp(argv[i], "--warmup") && v >= 0) {
            warmup = v;
        } else {
            fprintf(stderr, "allgather_bench: bad option %s %s\n", argv[i], argv[i + 1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        printf("kind,ranks,bytes,target,median_us,max_us,min_us,max_over_min,simple_max_us\n");
    }
    for (char *s = strtok(sizes, ","); s; s = strtok(NULL, ",")) {
        bench((size_t) strtoul(s, NULL, 10), rounds, batch, warmup, rank, size);
    }
    ipmc_counters_print(rank);
    MPI_Finalize();
    return 0;
}
