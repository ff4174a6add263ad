/*
 * Nonblocking broadcast benchmark in the manner of OSU's osu_ibcast: how much
 * of an MPI_Ibcast a rank can hide behind computation.
 *
 *   ibcast_bench [--sizes S1,S2,...] [--iterations N] [--tests T]
 *
 * For each message size, every rank, N times each (after a barrier):
 *   pure     MPI_Ibcast from rank 0, then MPI_Wait at once;
 *   compute  a busy loop as long as the slowest rank's mean `pure` time;
 *   overlap  MPI_Ibcast, the same busy loop (calling MPI_Test T times along
 *            the way; default 0, as osu_ibcast), then MPI_Wait.
 * Each time is the mean over the N iterations, then the largest over the
 * ranks. overlap_pct = 100 * (1 - (overlap - compute) / pure), within 0 … 100:
 * 100 when the broadcast costs nothing beyond the computation. Every
 * receiver's bytes are checked in every iteration.
 *
 * Output on rank 0, CSV: a header line, then one line per size.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

static void die(const char *what)
{
    fprintf(stderr, "ibcast_bench: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static unsigned char pattern(int iter, size_t i) { return (unsigned char) (iter * 31 + i * 7); }

static volatile double sink;

/* Computes for `seconds`, calling MPI_Test `tests` times along the way. */
static void compute(double seconds, MPI_Request *req, int tests)
{
    double start = MPI_Wtime(), x = 0;
    int done = 0, next = 1;
    for (;;) {
        for (int j = 0; j < 200; j++) x += j * 0.5;
        double spent = MPI_Wtime() - start;
        if (spent >= seconds) break;
        if (req && next <= tests && spent >= seconds * next / (tests + 1)) {
            MPI_Test(req, &done, MPI_STATUS_IGNORE);
            next++;
        }
    }
    sink = x;
}

/* The slowest rank's value. */
static double slowest(double v)
{
    double max;
    MPI_Allreduce(&v, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {1024, 65536, 1048576};
    int nsizes = 3, iterations = 50, tests = 0, rank, p;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    for (int i = 1; i < argc; i += 2) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            die("an option lacks its value");
        } else if (!strcmp(argv[i], "--sizes")) {
            char *list = strdup(v), *save = NULL;
            nsizes = 0;
            for (char *s = strtok_r(list, ",", &save); s; s = strtok_r(NULL, ",", &save)) {
                if (nsizes == MAX_SIZES) die("too many sizes");
                sizes[nsizes++] = strtoull(s, NULL, 0);
            }
            free(list);
        } else if (!strcmp(argv[i], "--iterations")) {
            iterations = atoi(v);
        } else if (!strcmp(argv[i], "--tests")) {
            tests = atoi(v);
        } else {
            die("unknown option");
        }
    }
    if (iterations < 1 || tests < 0) die("bad --iterations or --tests");
    if (rank == 0) {
        printf("ranks,bytes,pure_us,compute_us,overlap_us,overlap_pct\n");
        fflush(stdout);
    }
    for (int s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        unsigned char *buf = malloc(n ? n : 1);
        double pure = 0, busy = 0, both = 0, t;
        MPI_Request req;
        if (!buf) die("out of memory");
        for (int phase = 0; phase < 3; phase++) {
            double sum = 0;
            for (int it = 0; it < iterations; it++) {
                int check = phase != 1;
                if (check) {
                    if (rank == 0) {
                        for (size_t i = 0; i < n; i++) buf[i] = pattern(it + phase, i);
                    } else {
                        memset(buf, 0, n);
                    }
                }
                MPI_Barrier(MPI_COMM_WORLD);
                t = MPI_Wtime();
                if (phase == 1) {
                    compute(pure, NULL, 0);
                } else {
                    MPI_Ibcast(buf, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
                    if (phase == 2) compute(pure, &req, tests);
                    MPI_Wait(&req, MPI_STATUS_IGNORE);
                }
                sum += MPI_Wtime() - t;
                if (check && rank != 0) {
                    for (size_t i = 0; i < n; i++) {
                        if (buf[i] != pattern(it + phase, i)) die("wrong byte received");
                    }
                }
            }
            t = slowest(sum / iterations);
            if (phase == 0) pure = t;
            if (phase == 1) busy = t;
            if (phase == 2) both = t;
        }
        double pct = 100.0 * (1.0 - (both - busy) / pure);
        if (rank == 0) {
            printf("%d,%zu,%.1f,%.1f,%.1f,%.1f\n", p, n, pure * 1e6, busy * 1e6, both * 1e6,
                   pct < 0 ? 0 : pct > 100 ? 100 : pct);
            fflush(stdout);
        }
        free(buf);
    }
    MPI_Finalize();
    return 0;
}
