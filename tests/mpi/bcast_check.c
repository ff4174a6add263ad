/*
 * Checks every byte that MPI_Bcast delivers, on every rank, for many roots,
 * sizes, datatypes and communicators, and reports per communicator how many
 * broadcasts it made so that a test can compare with ipmc's statistics.
 *
 *   bcast_check [--max-bytes N] [--large-above N] [--big N] [--burst N] [--burst-bytes N]
 *               [--skew MODE]
 *               [--node-comm 1] [--intercomm 0]
 *
 * --max-bytes    largest message of the size sweep (default 1048576 + 1)
 * --large-above  a message of more bytes than this counts as "large" (default 1048576)
 * --big          one extra contiguous broadcast of N bytes per communicator (default 0)
 * --burst        back-to-back broadcasts with changing roots per communicator (default 64)
 * --burst-bytes  every one of them of N bytes (default 0: sizes from 1 to 5000 bytes)
 * --skew         who enters each checked broadcast late (default none):
 *                  none    nobody waits
 *                  first   the root enters first: every other rank sleeps 2 ms before MPI_Bcast
 *                  last    the root enters last: it sleeps 2 ms before MPI_Bcast
 *                  random  every rank sleeps 0-10 ms, drawn from its MPI_COMM_WORLD rank and
 *                          its count of checked broadcasts, so a run is reproducible
 *                  rank=N  the rank N of MPI_COMM_WORLD enters every one late: it sleeps 2 ms
 * --node-comm    1: also check a communicator of the ranks that share this rank's node
 *                (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED), named "node"
 * --intercomm    0: skip the intercommunicator (default 1), whose creation
 *                relies on Open MPI's own unchecked broadcasts
 *
 * Prints "bcast_check: comm=NAME rank=R size=S bcasts=N empty=E large=L bytes=B large_bytes=LB" per
 * rank and communicator, and "bcast_check: PASS" on rank 0 of MPI_COMM_WORLD when every
 * rank received exactly the root's bytes. Exits non-zero on the first wrong byte.
 */
#include <unistd.h>
#include <errno.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SENTINEL 0xEE
#define SKEW_US 2000         /* the late ranks' delay with --skew first, last or rank=N */
#define SKEW_RANDOM_US 10000 /* the largest delay with --skew random */

enum skew { SKEW_NONE, SKEW_FIRST, SKEW_LAST, SKEW_RANDOM, SKEW_RANK };

static size_t max_bytes = 1048576 + 1, large_above = 1048576, big = 0;
static int burst = 64, burst_bytes = 0;
static enum skew skew = SKEW_NONE;
static int late_rank = -1; /* with --skew rank=N */
static int node_comm = 0, intercomm = 1;
static int world_rank;
static long checked; /* checked broadcasts this process entered, all communicators */

typedef struct {
    long bcasts, empty, large;
    long long bytes, large_bytes;
} tally_t;

static void fail(MPI_Comm comm, const char *what, long call, size_t at)
{
    char name[MPI_MAX_OBJECT_NAME];
    int len, rank;
    MPI_Comm_get_name(comm, name, &len);
    MPI_Comm_rank(comm, &rank);
    fprintf(stderr, "bcast_check: FAIL comm=%s rank=%d call=%ld %s at byte %zu\n", name, rank,
            call, what, at);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* The bytes the root packs: depends on the call, so stale data cannot pass. */
static unsigned char pattern(long call, size_t i)
{
    uint64_t x = (uint64_t) call * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
    return (unsigned char) (x >> 29) ^ (unsigned char) i;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A well-mixed 64-bit value of (world rank, call): the random skew's draw. */
static uint64_t mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Delays this rank's entry into a broadcast from `root` as --skew asks. */
static void apply_skew(int rank, int root)
{
    long call = checked++;
    switch (skew) {
    case SKEW_NONE:
        break;
    case SKEW_FIRST:
        if (rank != root) {
            sleep_us(SKEW_US);
        }
        break;
    case SKEW_LAST:
        if (rank == root) {
            sleep_us(SKEW_US);
        }
        break;
    case SKEW_RANDOM:
        sleep_us((long) (mix(((uint64_t) world_rank << 32) ^ (uint64_t) call) %
                         (SKEW_RANDOM_US + 1)));
        break;
    case SKEW_RANK:
        if (world_rank == late_rank) {
            sleep_us(SKEW_US);
        }
        break;
    }
}

/*
 * One checked broadcast of `count` elements of `type` from `root`. The expected
 * buffer is a sentinel-filled buffer into which the pattern was unpacked, so the
 * holes of a derived datatype must keep the sentinel as well. With `bottom` the
 * message is described from MPI_BOTTOM: an hindexed type at the buffer's
 * absolute address (as Fortran's common blocks and messages of several arrays are).
 */
static void check_bcast_at(MPI_Comm comm, tally_t *t, int root, int count, MPI_Datatype type,
                           int bottom)
{
    int rank, psize, pos = 0;
    MPI_Aint lb, extent, tlb, textent;
    size_t span;
    long call = t->bcasts;
    unsigned char *packed, *expect, *buf;

    MPI_Comm_rank(comm, &rank);
    MPI_Type_get_extent(type, &lb, &extent);
    MPI_Type_get_true_extent(type, &tlb, &textent);
    span = count > 0 ? (size_t) ((count - 1) * extent + textent + tlb) : 1;
    MPI_Pack_size(count, type, comm, &psize);
    packed = malloc(psize > 0 ? psize : 1);
    expect = malloc(span);
    buf = malloc(span);
    if (!packed || !expect || !buf) {
        fail(comm, "out of memory", call, 0);
    }
    for (int i = 0; i < psize; i++) {
        packed[i] = pattern(call, i);
    }
    memset(expect, SENTINEL, span);
    if (count > 0) {
        MPI_Unpack(packed, psize, &pos, expect, count, type, comm);
    }
    if (rank == root) {
        memcpy(buf, expect, span);
    } else {
        memset(buf, SENTINEL, span);
    }
    apply_skew(rank, root);
    if (bottom) {
        MPI_Aint at;
        MPI_Datatype absolute;
        MPI_Get_address(buf, &at);
        MPI_Type_create_hindexed(1, &count, &at, type, &absolute);
        MPI_Type_commit(&absolute);
        MPI_Bcast(MPI_BOTTOM, 1, absolute, root, comm);
        MPI_Type_free(&absolute);
    } else {
        MPI_Bcast(buf, count, type, root, comm);
    }
    for (size_t i = 0; i < span; i++) {
        if (buf[i] != expect[i]) {
            fail(comm, rank == root ? "root's buffer changed" : "wrong byte", call, i);
        }
    }
    int tsize;
    MPI_Type_size(type, &tsize);
    size_t bytes = (size_t) tsize * (size_t) count;
    t->bcasts++;
    t->bytes += (long long) bytes;
    t->empty += bytes == 0;
    t->large += bytes > large_above;
    t->large_bytes += bytes > large_above ? (long long) bytes : 0;
    free(packed);
    free(expect);
    free(buf);
}

static void check_bcast(MPI_Comm comm, tally_t *t, int root, int count, MPI_Datatype type)
{
    check_bcast_at(comm, t, root, count, type, 0);
}

/* Derived datatypes whose element size divides sizes in a useful way. */
static void make_types(MPI_Datatype types[4], const char *names[4])
{
    int blocklens[3] = {1, 2, 3}, displs[3] = {0, 4, 9};
    int slens[3] = {1, 1, 2};
    MPI_Aint sdisp[3] = {0, 8, 20};
    MPI_Datatype stypes[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    MPI_Datatype s;

    types[0] = MPI_INT;
    names[0] = "int";
    MPI_Type_vector(3, 2, 5, MPI_INT, &types[1]); /* 24 bytes in a 52-byte span */
    names[1] = "vector";
    MPI_Type_indexed(3, blocklens, displs, MPI_SHORT, &types[2]); /* 12 bytes, holes */
    names[2] = "indexed";
    MPI_Type_create_struct(3, slens, sdisp, stypes, &s); /* char, double, 2 int: holes */
    MPI_Type_create_resized(s, 0, 32, &types[3]);
    MPI_Type_free(&s);
    names[3] = "struct";
    for (int i = 1; i < 4; i++) {
        MPI_Type_commit(&types[i]);
    }
}

static void run_comm(MPI_Comm comm, const char *name)
{
    int size, rank, tsize;
    tally_t t = {0};
    MPI_Datatype types[4];
    const char *tnames[4];

    MPI_Comm_set_name(comm, name);
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    make_types(types, tnames);

    /* Sizes 1 B .. max_bytes, every root, bytes and derived types. */
    for (int root = 0; root < size; root++) {
        check_bcast(comm, &t, root, 0, MPI_BYTE);
        for (size_t n = 1; n <= max_bytes; n = n < 8 ? n + 3 : n * 4 + 1) {
            check_bcast(comm, &t, root, (int) n, MPI_BYTE);
        }
        check_bcast(comm, &t, root, (int) max_bytes, MPI_BYTE);
        for (int k = 0; k < 4; k++) {
            MPI_Type_size(types[k], &tsize);
            for (size_t n = 1; n * tsize <= max_bytes; n = n * 16 + 1) {
                check_bcast(comm, &t, root, (int) n, types[k]);
            }
        }
    }
    /* From MPI_BOTTOM: a short, the longest and a derived datatype's message,
       none longer than the sweep's. */
    MPI_Type_size(types[3], &tsize);
    for (int root = 0; root < size; root++) {
        check_bcast_at(comm, &t, root, (int) (max_bytes < 1000 ? max_bytes : 1000), MPI_BYTE, 1);
        check_bcast_at(comm, &t, root, (int) max_bytes, MPI_BYTE, 1);
        if (max_bytes >= (size_t) tsize) {
            check_bcast_at(comm, &t, root, (int) (max_bytes / tsize < 1000 ? max_bytes / tsize : 1000),
                           types[3], 1);
        }
    }
    /* Back to back, root changing every call, no checks of timing in between. */
    for (int i = 0; i < burst; i++) {
        int n = burst_bytes > 0 ? burst_bytes : 1 + (i * 37) % 5000;
        check_bcast(comm, &t, (i * 7 + 3) % size, n, MPI_BYTE);
    }
    if (big > 0) {
        check_bcast(comm, &t, size - 1, (int) big, MPI_BYTE);
    }
    for (int k = 1; k < 4; k++) {
        MPI_Type_free(&types[k]);
    }
    printf("bcast_check: comm=%s rank=%d size=%d bcasts=%ld empty=%ld large=%ld bytes=%lld "
           "large_bytes=%lld\n",
           name, rank, size, t.bcasts, t.empty, t.large, t.bytes, t.large_bytes);
    fflush(stdout);
}

/* Frees a communicator, then pauses: ipmc prints a communicator's statistics
   (its own and its leaders' over two levels) when it is freed, and mpirun's
   daemon reads at most 4096 bytes of a process's output at a time, so the
   lines of several frees in a row would be cut at that boundary and another
   process's output spliced in. */
static void free_apart(MPI_Comm *comm)
{
    MPI_Comm_free(comm);
    usleep(20000);
}

/* Broadcast across an intercommunicator (which ipmc must leave to coll/inter). */
static void run_intercomm(int wrank, int wsize)
{
    MPI_Comm half, inter;
    int color = wrank % 2, hrank, value = -1;
    MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &half);
    MPI_Comm_rank(half, &hrank);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - color, 99, &inter);
    MPI_Comm_set_name(inter, "inter");
    if (color == 0) {
        value = 4242;
        MPI_Bcast(&value, 1, MPI_INT, hrank == 0 ? MPI_ROOT : MPI_PROC_NULL, inter);
    } else {
        MPI_Bcast(&value, 1, MPI_INT, 0, inter);
        if (value != 4242) {
            fail(inter, "intercommunicator value", 0, 0);
        }
    }
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
    (void) wsize;
}

int main(int argc, char **argv)
{
    int wrank, wsize;
    MPI_Comm dup, parity, reversed;

    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-bytes")) max_bytes = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--large-above")) large_above = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--big")) big = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--burst")) burst = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--burst-bytes")) burst_bytes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--node-comm")) node_comm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--intercomm")) intercomm = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--skew")) {
            const char *m = argv[i + 1];
            if (!strcmp(m, "none")) skew = SKEW_NONE;
            else if (!strcmp(m, "first")) skew = SKEW_FIRST;
            else if (!strcmp(m, "last")) skew = SKEW_LAST;
            else if (!strcmp(m, "random")) skew = SKEW_RANDOM;
            else if (sscanf(m, "rank=%d", &late_rank) == 1 && late_rank >= 0) skew = SKEW_RANK;
            else {
                fprintf(stderr, "bcast_check: unknown skew %s (none, first, last, random, rank=N)\n",
                        m);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else {
            fprintf(stderr, "bcast_check: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    world_rank = wrank;

    run_comm(MPI_COMM_WORLD, "world");
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    run_comm(dup, "dup");
    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, wrank, &parity);
    run_comm(parity, wrank % 2 ? "odd" : "even");
    MPI_Comm_split(MPI_COMM_WORLD, 0, wsize - wrank, &reversed);
    run_comm(reversed, "reversed");
    run_comm(MPI_COMM_SELF, "self");
    if (node_comm) {
        MPI_Comm node;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, wrank, MPI_INFO_NULL, &node);
        run_comm(node, "node");
        MPI_Comm_free(&node);
    }
    if (wsize >= 2 && intercomm) {
        run_intercomm(wrank, wsize);
    }
    free_apart(&reversed);
    free_apart(&parity);
    free_apart(&dup);

    MPI_Barrier(MPI_COMM_WORLD);
    if (wrank == 0) {
        printf("bcast_check: PASS\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
