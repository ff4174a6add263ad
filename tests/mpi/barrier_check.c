/*
 * Checks that MPI_Barrier releases no rank before every rank entered it, on
 * MPI_COMM_WORLD and on a duplicate of it, with one rank entering late in
 * turn, optionally between broadcasts whose bytes are checked.
 *
 *   barrier_check [--rounds N] [--late-us U] [--very-late S] [--bcasts 0|1]
 *
 * --rounds     barriers per communicator (default 200)
 * --late-us    in round i, rank i % size sleeps (i % 4) * U microseconds before
 *              entering (default 1000)
 * --very-late  in the middle round of MPI_COMM_WORLD the last rank sleeps S
 *              seconds before entering (default 0)
 * --bcasts     1: a checked MPI_Bcast (root i % size, 1 to 3000 bytes) after
 *              each barrier (default 1)
 *
 * Every process of a job on one machine reads the same CLOCK_MONOTONIC, so
 * rank 0 gathers each rank's entry and exit times and checks that every
 * round's earliest exit comes after its latest entry. Prints
 * "barrier_check: comm=NAME rounds=N slowest_us=T" per communicator and
 * "barrier_check: PASS" when every round and byte was right; exits non-zero
 * otherwise.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int rounds = 200, late_us = 1000, very_late_s = 0, bcasts = 1;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* A broadcast of round i, every byte checked; 0 when right. */
static int checked_bcast(MPI_Comm comm, int i, int rank, int size)
{
    static unsigned char buf[3000];
    int root = i % size, len = 1 + (i * 997) % (int) sizeof buf;
    for (int k = 0; k < len; ++k) {
        buf[k] = rank == root ? (unsigned char) (i + 7 * k) : 0xEE;
    }
    MPI_Bcast(buf, len, MPI_BYTE, root, comm);
    for (int k = 0; k < len; ++k) {
        if (buf[k] != (unsigned char) (i + 7 * k)) {
            fprintf(stderr, "barrier_check: rank %d: byte %d of broadcast %d wrong\n", rank, k, i);
            return 1;
        }
    }
    return 0;
}

/* The rounds on one communicator; the number of failures, on rank 0. */
static int check(MPI_Comm comm, const char *name, int very_late)
{
    int rank, size, failures = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int64_t *times = malloc(2 * sizeof(int64_t) * rounds);
    int64_t *all = rank == 0 ? malloc(2 * sizeof(int64_t) * rounds * size) : NULL;
    for (int i = 0; i < rounds; ++i) {
        if (very_late && i == rounds / 2 && rank == size - 1) {
            sleep_us(1000000L * very_late);
        } else if (rank == i % size) {
            sleep_us((long) (i % 4) * late_us);
        }
        times[2 * i] = now_ns();
        MPI_Barrier(comm);
        times[2 * i + 1] = now_ns();
        if (bcasts) {
            failures += checked_bcast(comm, i, rank, size);
        }
    }
    MPI_Gather(times, 2 * rounds, MPI_INT64_T, all, 2 * rounds, MPI_INT64_T, 0, comm);
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, comm);
    if (rank == 0) {
        int64_t slowest = 0;
        for (int i = 0; i < rounds; ++i) {
            int64_t last_in = INT64_MIN, first_out = INT64_MAX, last_out = INT64_MIN;
            int late = 0, early = 0;
            for (int r = 0; r < size; ++r) {
                int64_t in = all[(size_t) r * 2 * rounds + 2 * i];
                int64_t out = all[(size_t) r * 2 * rounds + 2 * i + 1];
                if (in > last_in) {
                    last_in = in, late = r;
                }
                if (out < first_out) {
                    first_out = out, early = r;
                }
                if (out > last_out) {
                    last_out = out;
                }
            }
            if (first_out < last_in) {
                fprintf(stderr,
                        "barrier_check: %s round %d: rank %d left %lld us before rank %d "
                        "entered\n",
                        name, i, early, (long long) (last_in - first_out) / 1000, late);
                ++failures;
            }
            if (last_out - last_in > slowest) {
                slowest = last_out - last_in;
            }
        }
        printf("barrier_check: comm=%s rounds=%d slowest_us=%lld\n", name, rounds,
               (long long) slowest / 1000);
    }
    free(times);
    free(all);
    return failures;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--rounds")) {
            rounds = v;
        } else if (!strcmp(argv[i], "--late-us")) {
            late_us = v;
        } else if (!strcmp(argv[i], "--very-late")) {
            very_late_s = v;
        } else if (!strcmp(argv[i], "--bcasts")) {
            bcasts = v;
        } else {
            fprintf(stderr, "barrier_check: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_name(dup, "dup");
    int failures = check(MPI_COMM_WORLD, "world", very_late_s);
    failures += check(dup, "dup", 0);
    MPI_Comm_free(&dup);
    if (rank == 0) {
        printf("barrier_check: %s\n", failures ? "FAIL" : "PASS");
        fflush(stdout);
    }
    MPI_Finalize();
    return failures ? 1 : 0;
}
