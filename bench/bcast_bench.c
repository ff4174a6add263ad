/*
 * Broadcast benchmark after the thesis's method (§4.2.1, figure 17): the
 * completion time of MPI_Bcast on every rank separately.
 *
 *   bcast_bench [--sizes S1,S2,...] [--rounds R] [--big-rounds R2]
 *               [--big-from BYTES] [--root-delay US] [--warmup W]
 *               [--late-rank L --late-us U] [--root R]
 *               [--call bcast|ibcast|persistent]
 *
 * Sizes of BYTES or more are measured in R2 rounds (default: R), so that the
 * largest messages, whose every round is long, can use fewer.
 *
 * Before the rounds of each size, W rounds of that size (with the targets
 * in turn; default 144 up to 128 KiB, 48 above) go
 * unrecorded, as OSU's benchmarks skip their first iterations: connections
 * are set up then, and a component that chooses its algorithm by measuring
 * its first calls has chosen, on calls made as the measured ones are
 * (ipmc's automatic choice: up to 4 candidates of 8 calls up to 8 KiB, 5 of
 * 2 above, then 16 calls while the ranks agree, and a closer look of 4
 * times as many calls where the times were short up to 128 KiB; its
 * measured calls end by call 66 on one level; over two levels the whole
 * communicator measures up to 6 candidates more once its leaders may have
 * decided: to call 72 up to 8 KiB, 138 up to 128 KiB, 46 above; a unit
 * test of ipmc's choice checks these bounds).
 * W = 0 records from the first call.
 *
 * With --root R, rank R is the root (default 0) and the targets are the
 * others, in turn from R + 1; the root prints.
 *
 * --call says how each broadcast is made: MPI_Bcast (default); MPI_Ibcast
 * and MPI_Wait; or MPI_Start and MPI_Wait of a persistent broadcast
 * (MPI_Bcast_init; MPIX_Bcast_init in Open MPI 4.1), made at the first
 * broadcast of each size and started by every broadcast of it.
 *
 * With --late-rank L, rank L (not the root) enters every broadcast U µs
 * after the barrier (--late-us, default 2000; the root enters after
 * --root-delay): the targets' times then show whom one late rank holds
 * back, and by how much.
 *
 * For each message size, each round and each target rank t (1 .. p-1):
 *   1. the root fills the message with a fresh pattern and computes its
 *      checksum (64-bit FNV-1a over words); t clears its buffer; the root posts
 *      the receive for t's reply; all ranks meet in a barrier; the root waits
 *      --root-delay µs, so that it enters the broadcast last;
 *   2. bcast ping-pong: the root broadcasts the message; rank t, once its
 *      broadcast returns, computes the checksum of the bytes it received and
 *      sends it back in a 16-byte reply (the checksum and the time t spent
 *      computing it) with a ready-mode send. The root's time from entering
 *      MPI_Bcast to the reply's arrival is t_bcast. A checksum that differs
 *      from the root's aborts the run, naming size, round and target: every
 *      target's bytes are checked in every round;
 *   3. a ping-pong of the same 16-byte message between the root and t, in
 *      ready mode both ways, repeated a few times: half the median round trip
 *      is t_oneway, the transit time of the reply of step 2;
 *   4. t's completion time is t_bcast − t_sum − t_oneway, where t_sum is the
 *      checksum time t reported.
 * This is the thesis's measurement with a short pong: the thesis sends the
 * whole message back and subtracts half a ping-pong of the whole message,
 * i.e. the pong's transit; here the pong carries only the checksum, and what
 * is subtracted is again exactly the pong's transit (measured with the same
 * message, mode and pair of ranks), plus the checksum time that the thesis's
 * pong did not have. The time from the root's entry into MPI_Bcast to the
 * return of MPI_Bcast on t is what remains, as in the thesis, while a round
 * of a large message costs one broadcast instead of three transfers of it.
 *
 * The median over the rounds is reported per target, with the largest and
 * smallest over the targets. For comparison the simple figure is reported
 * too: R back-to-back broadcasts after a barrier, the slowest rank's time
 * divided by R (which pipelines and flatters chain-like algorithms, as
 * §4.2.1 explains).
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

#include "ipmc_counters.h"

#if defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION < 5
#include <mpi-ext.h>
#define BCAST_INIT MPIX_Bcast_init
#else
#define BCAST_INIT MPI_Bcast_init
#endif

#define TAG_REPLY 7001
#define TAG_PING 7002
#define MAX_SIZES 64
/* Small ping-pongs per round that give the reply's one-way time. */
#define PINGS 5

/* The reply of a target: the checksum of its bytes and the nanoseconds it took. */
struct reply {
    uint64_t sum;
    uint64_t sum_ns;
};

/* The rank that enters every recorded and unrecorded broadcast late (-1:
   none), and by how much after the barrier. */
static int late_rank = -1;
static int late_us = 2000;

/* The rank every broadcast comes from. */
static int root = 0;

/* How each broadcast is made (--call). */
static enum { CALL_BCAST, CALL_IBCAST, CALL_PERSISTENT } call = CALL_BCAST;

/* One broadcast of `n` bytes of `buf` from the root, made as --call says. */
static void bcast(unsigned char *buf, int n, MPI_Comm comm)
{
    static MPI_Request persistent = MPI_REQUEST_NULL;
    static unsigned char *persistent_buf;
    static int persistent_n = -1;
    MPI_Request req;
    switch (call) {
    case CALL_IBCAST:
        MPI_Ibcast(buf, n, MPI_BYTE, root, comm, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        break;
    case CALL_PERSISTENT:
        if (buf != persistent_buf || n != persistent_n) {
            if (MPI_REQUEST_NULL != persistent) {
                MPI_Request_free(&persistent);
            }
            BCAST_INIT(buf, n, MPI_BYTE, root, comm, MPI_INFO_NULL, &persistent);
            persistent_buf = buf;
            persistent_n = n;
        }
        MPI_Start(&persistent);
        MPI_Wait(&persistent, MPI_STATUS_IGNORE);
        break;
    default:
        MPI_Bcast(buf, n, MPI_BYTE, root, comm);
    }
}

static void die(const char *what)
{
    fprintf(stderr, "bcast_bench: %s\n", what);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* A pseudo-random pattern that differs in every byte from one seed to the next. */
static void fill(unsigned char *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 0x2545f4914f6cdd1dull;
    for (size_t i = 0; i < len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t n = len - i < 8 ? len - i : 8;
        memcpy(buf + i, &x, n);
    }
}

/* 64-bit FNV-1a over 8-byte words (then the tail bytes): any single changed
   word changes the result, and it runs at memory speed. */
static uint64_t checksum(const unsigned char *buf, size_t len)
{
    const uint64_t prime = 0x100000001b3ull;
    uint64_t h = 0xcbf29ce484222325ull ^ len, w;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&w, buf + i, 8);
        h = (h ^ w) * prime;
    }
    for (; i < len; i++) {
        h = (h ^ buf[i]) * prime;
    }
    return h;
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

/* Half the median round trip of the 16-byte reply between the root and
   `target` (root only; the target answers). Each side posts its next
   receive before it sends, so every ready-mode send finds its receive. */
static double oneway_small(MPI_Comm comm, int rank, int target)
{
    struct reply ping = {0, 0}, pong = {0, 0};
    double rtt[PINGS];
    MPI_Request req;

    if (rank == root) {
        MPI_Irecv(&pong, sizeof pong, MPI_BYTE, target, TAG_REPLY, comm, &req);
    } else if (rank == target) {
        MPI_Irecv(&ping, sizeof ping, MPI_BYTE, root, TAG_PING, comm, &req);
    }
    MPI_Barrier(comm);
    for (int k = 0; k < PINGS; k++) {
        if (rank == root) {
            rtt[k] = -MPI_Wtime();
            MPI_Rsend(&ping, sizeof ping, MPI_BYTE, target, TAG_PING, comm);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            rtt[k] += MPI_Wtime();
            if (k + 1 < PINGS) {
                MPI_Irecv(&pong, sizeof pong, MPI_BYTE, target, TAG_REPLY, comm, &req);
            }
        } else if (rank == target) {
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            if (k + 1 < PINGS) {
                MPI_Irecv(&ping, sizeof ping, MPI_BYTE, root, TAG_PING, comm, &req);
            }
            MPI_Rsend(&pong, sizeof pong, MPI_BYTE, root, TAG_REPLY, comm);
        }
    }
    return rank == root ? median(rtt, PINGS) / 2 : 0;
}

/* One measurement of rank `target`'s completion time, in seconds (root only). */
static double one_round(MPI_Comm comm, int rank, int target, unsigned char *buf, size_t len,
                        int round, int root_delay_us)
{
    struct reply reply = {0, 0};
    uint64_t sent_sum = 0;
    MPI_Request req;
    double t_bcast = 0, t_sum, t_oneway;
    int n = (int) len;

    if (rank == root) {
        fill(buf, len, (uint64_t) len * 1000003u + (uint64_t) round * 4099u + (uint64_t) target);
        sent_sum = checksum(buf, len);
        MPI_Irecv(&reply, sizeof reply, MPI_BYTE, target, TAG_REPLY, comm, &req);
    } else if (rank == target) {
        memset(buf, 0, len);
    }
    MPI_Barrier(comm);
    if (rank == root) {
        if (root_delay_us > 0) {
            usleep((useconds_t) root_delay_us);
        }
        t_bcast = -MPI_Wtime();
        bcast(buf, n, comm);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        t_bcast += MPI_Wtime();
        if (reply.sum != sent_sum) {
            fprintf(stderr,
                    "bcast_bench: %zu bytes, round %d: the checksum of rank %d's copy differs "
                    "from the root's message\n",
                    len, round, target);
            MPI_Abort(comm, 3);
        }
    } else {
        if (rank == late_rank) {
            usleep((useconds_t) late_us);
        }
        bcast(buf, n, comm);
        if (rank == target) {
            t_sum = -MPI_Wtime();
            reply.sum = checksum(buf, len);
            t_sum += MPI_Wtime();
            reply.sum_ns = (uint64_t) (t_sum * 1e9);
            MPI_Rsend(&reply, sizeof reply, MPI_BYTE, root, TAG_REPLY, comm);
        }
    }
    t_oneway = oneway_small(comm, rank, target);
    return t_bcast - (double) reply.sum_ns * 1e-9 - t_oneway;
}

/* The simple figure: the slowest rank's time for `rounds` back-to-back broadcasts, per broadcast. */
static double simple_max(MPI_Comm comm, unsigned char *buf, size_t len, int rounds)
{
    double t, tmax;
    MPI_Barrier(comm);
    t = -MPI_Wtime();
    for (int i = 0; i < rounds; i++) {
        bcast(buf, (int) len, comm);
    }
    t += MPI_Wtime();
    MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, root, comm);
    return tmax / rounds;
}

/* A whole decimal or 0x number that fits `max`, or the run stops. */
static unsigned long long number(const char *text, unsigned long long max, const char *what)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 0);
    if (end == text || *end || text[0] == '-' || v > max) {
        die(what);
    }
    return v;
}

int main(int argc, char **argv)
{
    size_t sizes[MAX_SIZES] = {16, 256, 1024, 4096, 8192, 65536, 262144, 1048576, 4194304};
    int nsizes = 9, rounds = 11, big_rounds = -1, root_delay_us = 1000, warmup = -1, rank, p;
    size_t largest = 0, big_from = 1048576;
    unsigned char *buf;
    double *samples, *per_target;

    MPI_Init(&argc, &argv);
    ipmc_counters_start(&(MPI_Comm){MPI_COMM_WORLD});
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
                if (nsizes == MAX_SIZES) {
                    die("too many sizes");
                }
                sizes[nsizes++] = (size_t) number(s, (size_t) 1 << 30, "sizes must be 1 byte to 1 GiB");
            }
            free(list);
        } else if (!strcmp(argv[i], "--rounds")) {
            rounds = (int) number(v, 1000000, "--rounds must be 1 .. 1000000");
        } else if (!strcmp(argv[i], "--big-rounds")) {
            big_rounds = (int) number(v, 1000000, "--big-rounds must be 1 .. 1000000");
        } else if (!strcmp(argv[i], "--big-from")) {
            big_from = (size_t) number(v, (size_t) 1 << 30, "--big-from must be 0 .. 1 GiB");
        } else if (!strcmp(argv[i], "--warmup")) {
            warmup = (int) number(v, 1000000, "--warmup must be 0 .. 1000000");
        } else if (!strcmp(argv[i], "--root-delay")) {
            root_delay_us = (int) number(v, 10000000, "--root-delay must be 0 .. 10000000 µs");
        } else if (!strcmp(argv[i], "--late-rank")) {
            late_rank = (int) number(v, 1000000, "--late-rank must be a rank");
        } else if (!strcmp(argv[i], "--late-us")) {
            late_us = (int) number(v, 10000000, "--late-us must be 0 .. 10000000 µs");
        } else if (!strcmp(argv[i], "--root")) {
            root = (int) number(v, 1000000, "--root must be a rank");
        } else if (!strcmp(argv[i], "--call")) {
            if (!strcmp(v, "bcast")) {
                call = CALL_BCAST;
            } else if (!strcmp(v, "ibcast")) {
                call = CALL_IBCAST;
            } else if (!strcmp(v, "persistent")) {
                call = CALL_PERSISTENT;
            } else {
                die("--call must be bcast, ibcast or persistent");
            }
        } else {
            die("unknown option (see the comment at the top of bench/bcast_bench.c)");
        }
    }
    if (big_rounds < 0) {
        big_rounds = rounds;
    }
    if (p < 2 || rounds < 1 || big_rounds < 1 || nsizes < 1) {
        die("needs 2 or more ranks, 1 or more rounds and sizes");
    }
    if (root >= p) {
        die("--root must be a rank");
    }
    if (late_rank == root || late_rank >= p) {
        die("--late-rank must name a rank other than the root");
    }
    for (int s = 0; s < nsizes; s++) {
        if (sizes[s] < 1) {
            die("sizes must be 1 byte to 1 GiB");
        }
        largest = sizes[s] > largest ? sizes[s] : largest;
    }
    buf = malloc(largest);
    samples = malloc(sizeof(double) * (size_t) (rounds > big_rounds ? rounds : big_rounds));
    per_target = malloc(sizeof(double) * (size_t) p);
    if (!buf || !samples || !per_target) {
        die("out of memory");
    }
    if (rank == root) {
        printf("kind,ranks,bytes,target,median_us,max_us,min_us,max_over_min,simple_max_us\n");
    }
    for (int s = 0; s < nsizes; s++) {
        size_t len = sizes[s];
        int size_rounds = len >= big_from ? big_rounds : rounds;
        double hi = 0, lo = 1e30, simple;
        int size_warmup = warmup >= 0 ? warmup : len <= 131072 ? 144 : 48;
        for (int w = 0; w < size_warmup; w++) {
            int target = (root + 1 + w % (p - 1)) % p;
            one_round(MPI_COMM_WORLD, rank, target, buf, len, w, root_delay_us);
        }
        for (int k = 1; k < p; k++) {
            int target = (root + k) % p;
            for (int r = 0; r < size_rounds; r++) {
                samples[r] = one_round(MPI_COMM_WORLD, rank, target, buf, len, r, root_delay_us);
            }
            if (rank == root) {
                per_target[target] = median(samples, size_rounds);
                hi = per_target[target] > hi ? per_target[target] : hi;
                lo = per_target[target] < lo ? per_target[target] : lo;
                printf("rank,%d,%zu,%d,%.1f,,,,\n", p, len, target, per_target[target] * 1e6);
            }
        }
        simple = simple_max(MPI_COMM_WORLD, buf, len, size_rounds);
        if (rank == root) {
            printf("summary,%d,%zu,,,%.1f,%.1f,%.3f,%.1f\n", p, len, hi * 1e6, lo * 1e6,
                   lo > 0 ? hi / lo : 0.0, simple * 1e6);
            fflush(stdout);
        }
    }
    free(buf);
    free(samples);
    free(per_target);
    ipmc_counters_print(rank);
    MPI_Finalize();
    return 0;
}
