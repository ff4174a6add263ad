/*
 * Barrier benchmark: the time of one MPI_Barrier, as OSU's osu_barrier
 * measures it, per rank.
 *
 *   barrier_bench [--rounds R] [--batch B] [--warmup W] [--series S] [--connect K]
 *
 * After W barriers that go unrecorded (default 100: ipmc's automatic choice
 * measures its first 24 barriers and decides during the next 16; over two
 * levels it measures once the leaders decided, from the 41st), each of
 * R rounds (default 200) times B back-to-back barriers (default 10) on every
 * rank and records the time divided by B; back to back, every rank enters a
 * barrier as soon as the one before released it, so the time is one
 * barrier's: the arrivals and the release. The rounds begin with a barrier
 * of their own, untimed.
 *
 * Output on rank 0, CSV in the form of bcast_bench's (bytes is 0, target the
 * rank): a header line, one line per rank with its median over the rounds
 * (`kind=rank`), and a summary (`kind=summary`) with the largest and the
 * smallest of those medians; simple_max_us is the slowest rank's mean.
 * With --series S, then one line per S rounds in their order (`kind=series`,
 * target the first round's index): the slowest rank's median over them, to
 * see whether the time changes during a run.
 *
 * With --connect K, each rank first exchanges a message with the ranks
 * 1 ... K before and after it, which opens those connections of Open MPI's
 * TCP transport, and rank 0 then prints a line `kind=sockets` with the
 * sockets a rank holds at the end (median_us the mean over the ranks,
 * max_us and min_us the extremes): to see what connections the barriers
 * opened and what more of them cost each poll of its progress engine.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <unistd.h>

#include "ipmc_counters.h"

static int compare(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

/* The sockets among this process's open files. */
static int sockets(void)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    char path[300], link[64];
    while (dir != NULL && (e = readdir(dir)) != NULL) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, link, sizeof link - 1);
        if (len > 0) {
            link[len] = 0;
            n += !strncmp(link, "socket:", 7);
        }
    }
    if (dir != NULL) {
        closedir(dir);
    }
    return n;
}

int main(int argc, char **argv)
{
    int rounds = 200, batch = 10, warmup = 100, series = 0, connect = -1;
    MPI_Init(&argc, &argv);
    ipmc_counters_start(&(MPI_Comm){MPI_COMM_WORLD});
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--rounds") && v > 0) {
            rounds = v;
        } else if (!strcmp(argv[i], "--batch") && v > 0) {
            batch = v;
        } else if (!strcmp(argv[i], "--warmup") && v >= 0) {
            warmup = v;
        } else if (!strcmp(argv[i], "--series") && v > 0) {
            series = v;
        } else if (!strcmp(argv[i], "--connect") && v >= 0) {
            connect = v;
        } else {
            fprintf(stderr, "barrier_bench: bad option %s %s\n", argv[i], argv[i + 1]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int k = 1; k <= connect && k < size; ++k) {
        char out = 0, in;
        int up = (rank + k) % size, down = (rank - k + size) % size;
        MPI_Sendrecv(&out, 1, MPI_CHAR, up, 0, &in, 1, MPI_CHAR, down, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Sendrecv(&out, 1, MPI_CHAR, down, 1, &in, 1, MPI_CHAR, up, 1, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
    }
    for (int i = 0; i < warmup; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    double *t = malloc(sizeof(double) * rounds), sum = 0;
    for (int r = 0; r < rounds; ++r) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int b = 0; b < batch; ++b) {
            MPI_Barrier(MPI_COMM_WORLD);
        }
        t[r] = (MPI_Wtime() - start) / batch;
        sum += t[r];
    }
    /* Counted before the reductions below open connections of their own. */
    int socks[2] = {0, 0}, sock_sum = 0;
    if (connect >= 0) {
        socks[0] = sockets();
        socks[1] = -socks[0];
        MPI_Reduce(socks, &sock_sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, socks, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    }
    int blocks = series > 0 ? (rounds + series - 1) / series : 0;
    double *block = malloc(sizeof(double) * (blocks + 1));
    double *slowest = malloc(sizeof(double) * (blocks + 1));
    for (int b = 0; b < blocks; ++b) {
        int first = b * series, n = rounds - first < series ? rounds - first : series;
        qsort(t + first, n, sizeof(double), compare);
        block[b] = t[first + n / 2];
    }
    if (blocks > 0) {
        MPI_Reduce(block, slowest, blocks, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    }
    qsort(t, rounds, sizeof(double), compare);
    double mine[2] = {t[rounds / 2], sum / rounds};
    double *all = rank == 0 ? malloc(sizeof(double) * 2 * size) : NULL;
    MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double hi = 0, lo = 1e30, mean_hi = 0;
        printf("kind,ranks,bytes,target,median_us,max_us,min_us,max_over_min,simple_max_us\n");
        for (int r = 0; r < size; ++r) {
            double median = all[2 * r], mean = all[2 * r + 1];
            printf("rank,%d,0,%d,%.1f,,,,\n", size, r, median * 1e6);
            hi = median > hi ? median : hi;
            lo = median < lo ? median : lo;
            mean_hi = mean > mean_hi ? mean : mean_hi;
        }
        printf("summary,%d,0,,,%.1f,%.1f,%.3f,%.1f\n", size, hi * 1e6, lo * 1e6, hi / lo,
               mean_hi * 1e6);
        for (int b = 0; b < blocks; ++b) {
            printf("series,%d,0,%d,%.1f,,,,\n", size, b * series, slowest[b] * 1e6);
        }
        if (connect >= 0) {
            printf("sockets,%d,0,,%.1f,%d,%d,,\n", size, (double) sock_sum / size, socks[0],
                   -socks[1]);
        }
        fflush(stdout);
    }
    free(t);
    free(all);
    free(block);
    free(slowest);
    ipmc_counters_print(rank);
    MPI_Finalize();
    return 0;
}
