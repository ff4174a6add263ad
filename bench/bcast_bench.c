/*
 * Broadcast benchmark after the thesis's method (§4.2.1, figure 17): the
 * completion time of MPI_Bcast on every rank separately.
 *
 *   bcast_bench [--sizes S1,S2,...] [--rounds R] [--root-delay US]
 *
 * For each message size, each round and each target rank t:
 *   1. the root posts a receive for t's reply; all ranks meet in a barrier; the
 *      root waits --root-delay µs, so that it enters the broadcast last;
 *   2. bcast ping-pong: the root broadcasts buffer A; rank t, once its
 *      broadcast returns, sends the message back with a ready-mode send into
 *      the root's buffer B; the root's time from entering MPI_Bcast to B's
 *      arrival is t_bcast;
 *   3. a plain ping-pong of the same message between the root and t (both
 *      ways ready-mode sends) gives 2·t_pong;
 *   4. t's completion time is t_bcast − t_pong.
 * The root checks that B equals A (a fresh pattern each round). The median
 * over the rounds is reported per target, with the largest and smallest over
 * the targets. For comparison the simple figure is reported too: R
 * back-to-back broadcasts after a barrier, the slowest rank's time divided by
 * R (which pipelines and flatters chain-like algorithms, as §4.2.1 explains).
 *
 * Output on the root, CSV: a header line, then one line per size and target
 * (`kind=rank`), one per size with the summary (`kind=summary`).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_REPLY 7001
#define TAG_PING 7002
#define MAX_SIZES 64

static void die(const char *what)
{
    fprintf(stderr, "bcast_bench: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void fill(unsigned char *buf, size_t len, long round)
{
    for (size_t i = 0; i < len; i++) {
        buf[i] = (unsigned char) ((i * 131u) ^ (size_t) round ^ (i >> 9));
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t) n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* One measurement of rank `target`'s completion time, in seconds (root only). */
static double one_round(MPI_Comm comm, int rank, int target, unsigned char *a, unsigned char *b,
                        size_t len, long round, int root_delay_us)
{
    MPI_Request req;
    double t_bcast = 0, t_pong = 0;
    int n = (int) len;

    if (rank == 0) {
        fill(a, len, round);
        memset(b, 0, len);
        MPI_Irecv(b, n, MPI_BYTE, target, TAG_REPLY, comm, &req);
    }
    MPI_Barrier(comm);
    if (rank == 0) {
        if (root_delay_us > 0) {
            usleep((useconds_t) root_delay_us);
        }
        t_bcast = -MPI_Wtime();
        MPI_Bcast(a, n, MPI_BYTE, 0, comm);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        t_bcast += MPI_Wtime();
        if (memcmp(a, b, len) != 0) {
            die("the target's copy differs from the root's message");
        }
    } else {
        MPI_Bcast(a, n, MPI_BYTE, 0, comm);
        if (rank == target) {
            MPI_Rsend(a, n, MPI_BYTE, 0, TAG_REPLY, comm);
        }
    }

    /* The plain ping-pong: both receives are posted before the barrier, so
       both ready-mode sends are legal. */
    if (rank == 0) {
        MPI_Irecv(b, n, MPI_BYTE, target, TAG_REPLY, comm, &req);
    } else if (rank == target) {
        MPI_Irecv(a, n, MPI_BYTE, 0, TAG_PING, comm, &req);
    }
    MPI_Barrier(comm);
    if (rank == 0) {
        t_pong = -MPI_Wtime();
        MPI_Rsend(a, n, MPI_BYTE, target, TAG_PING, comm);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        t_pong += MPI_Wtime();
        t_pong /= 2;
    } else if (rank == target) {
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        MPI_Rsend(a, n, MPI_BYTE, 0, TAG_REPLY, comm);
    }
    return t_bcast - t_pong;
}

/* The simple figure: the slowest rank's time for `rounds` back-to-back broadcasts, per broadcast. */
static double simple_max(MPI_Comm comm, unsigned char *a, size_t len, int rounds)
{
    double t, tmax;
    MPI_Barrier(comm);
    t = -MPI_Wtime();
    for (int i = 0; i < rounds; i++) {
        MPI_Bcast(a, (int) len, MPI_BYTE, 0, comm);
    }
    t += MPI_Wtime();
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, comm);
    return tmax / rounds;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {16, 256, 4096, 8192, 65536, 262144, 1048576, 4194304};
    int nsizes = 8, rounds = 11, root_delay_us = 1000, rank, p;
    size_t largest = 0;
    unsigned char *a, *b;
    double *samples, *per_target;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--sizes")) {
            char *s = argv[i + 1];
            nsizes = 0;
            while (*s && nsizes < MAX_SIZES) {
                sizes[nsizes++] = strtoull(s, &s, 0);
                if (*s == ',') {
                    s++;
                }
            }
        } else if (!strcmp(argv[i], "--rounds")) {
            rounds = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--root-delay")) {
            root_delay_us = atoi(argv[i + 1]);
        } else {
            die("unknown option");
        }
    }
    if (p < 2 || rounds < 1 || nsizes < 1) {
        die("needs 2 or more ranks, 1 or more rounds and sizes");
    }
    for (int s = 0; s < nsizes; s++) {
        if (sizes[s] < 1 || sizes[s] > (size_t) 1 << 30) {
            die("sizes must be 1 byte to 1 GiB");
        }
        largest = sizes[s] > largest ? sizes[s] : largest;
    }
    a = malloc(largest);
    b = malloc(largest);
    samples = malloc(sizeof(double) * (size_t) rounds);
    per_target = malloc(sizeof(double) * (size_t) p);
    if (!a || !b || !samples || !per_target) {
        die("out of memory");
    }
    if (rank == 0) {
        printf("kind,ranks,bytes,target,median_us,max_us,min_us,max_over_min,simple_max_us\n");
    }
    for (int s = 0; s < nsizes; s++) {
        size_t len = sizes[s];
        double hi = 0, lo = 1e30, simple;
        for (int target = 1; target < p; target++) {
            for (int r = 0; r < rounds; r++) {
                samples[r] = one_round(MPI_COMM_WORLD, rank, target, a, b, len,
                                       (long) r * p + target, root_delay_us);
            }
            if (rank == 0) {
                per_target[target] = median(samples, rounds);
                hi = per_target[target] > hi ? per_target[target] : hi;
                lo = per_target[target] < lo ? per_target[target] : lo;
                printf("rank,%d,%zu,%d,%.1f,,,,\n", p, len, target, per_target[target] * 1e6);
            }
        }
        simple = simple_max(MPI_COMM_WORLD, a, len, rounds);
        if (rank == 0) {
            printf("summary,%d,%zu,,,%.1f,%.1f,%.3f,%.1f\n", p, len, hi * 1e6, lo * 1e6,
                   lo > 0 ? hi / lo : 0.0, simple * 1e6);
            fflush(stdout);
        }
    }
    free(a);
    free(b);
    free(samples);
    free(per_target);
    MPI_Finalize();
    return 0;
}
