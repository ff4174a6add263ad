/*
 * Nonblocking broadcasts, checked byte for byte on every rank:
 *
 *   ibcast_check [--max-bytes N] [--rounds R] [--split-first 1]
 *
 * Each round, on MPI_COMM_WORLD (named "world") and on a duplicate of it
 * ("dup"), with a root that moves from round to round:
 *   overlap   several MPI_Ibcast outstanding at once on both communicators,
 *             of sizes 1 B, 1 KiB, 64 KiB, ... up to N (default 1048576),
 *             MPI_BYTE and a strided vector type, while the ranks compute
 *             and call MPI_Test; then MPI_Waitall;
 *   mixed     an MPI_Ibcast, then an MPI_Bcast on the same communicator
 *             before the MPI_Ibcast is waited for;
 *   freed     an MPI_Ibcast on a new duplicate ("freed"), which is freed
 *             before the request is waited for;
 *   bottom    two MPI_Ibcast on the duplicate from MPI_BOTTOM, of up to
 *             64 KiB each: one hindexed block at the buffer's absolute
 *             address, and its two halves as two blocks, the second first.
 * With --split-first 1, each communicator has an MPI_Barrier before its
 * first MPI_Ibcast (ipmc splits a communicator whose nodes hold several
 * ranks into its two levels at its first blocking collective).
 * Prints "ibcast_check: PASS" on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OUT 32

static unsigned char pattern(long call, size_t i)
{
    return (unsigned char) ((call * 151 + i * 13 + (i >> 11)) & 0xff);
}

static void fail(const char *what, long call, size_t at)
{
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "ibcast_check: FAIL %s rank=%d call=%ld at byte %zu\n", what, rank, call, at);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* One broadcast's message: `n` bytes, as bytes or as every other int of a
   strided vector (the gaps must stay untouched). */
struct msg {
    long call;
    size_t n;
    int strided;
    unsigned char *buf;
    size_t buf_len;
    MPI_Datatype type;
    int count;
};

static void msg_init(struct msg *m, long call, size_t n, int strided, int is_root)
{
    m->call = call;
    m->n = n;
    m->strided = strided && n % sizeof(int) == 0 && n >= sizeof(int);
    if (m->strided) {
        int ints = (int) (n / sizeof(int));
        MPI_Type_vector(ints, 1, 2, MPI_INT, &m->type);
        MPI_Type_commit(&m->type);
        m->count = 1;
        m->buf_len = 2 * n;
    } else {
        m->type = MPI_BYTE;
        m->count = (int) n;
        m->buf_len = n;
    }
    m->buf = malloc(m->buf_len ? m->buf_len : 1);
    memset(m->buf, 0x5A, m->buf_len);
    for (size_t i = 0; i < n; i++) {
        size_t at = m->strided ? (i / sizeof(int)) * 2 * sizeof(int) + i % sizeof(int) : i;
        if (is_root) m->buf[at] = pattern(call, i);
    }
}

static void msg_check(struct msg *m, const char *what)
{
    for (size_t at = 0; at < m->buf_len; at++) {
        int in_gap = m->strided && (at / sizeof(int)) % 2 == 1;
        size_t i = m->strided ? (at / (2 * sizeof(int))) * sizeof(int) + at % sizeof(int) : at;
        unsigned char want = in_gap ? 0x5A : pattern(m->call, i);
        if (m->buf[at] != want) fail(what, m->call, at);
    }
    if (m->strided) MPI_Type_free(&m->type);
    free(m->buf);
}

static volatile double sink;

/* Work between the calls, with MPI_Test now and then. */
static void compute(MPI_Request *reqs, int n)
{
    int done;
    for (int k = 0; k < 200; k++) {
        double x = 0;
        for (int j = 0; j < 2000; j++) x += j * 0.5;
        sink = x;
        MPI_Testall(n, reqs, &done, MPI_STATUSES_IGNORE);
        if (done) break;
    }
}

int main(int argc, char **argv)
{
    size_t max_bytes = 1048576;
    int rounds = 3, split_first = 0, rank, size;
    long call = 0;
    MPI_Comm dup;

    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-bytes")) max_bytes = strtoull(argv[i + 1], NULL, 0);
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--split-first")) split_first = atoi(argv[i + 1]);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_name(MPI_COMM_WORLD, "world");
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_name(dup, "dup");
    if (split_first) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(dup);
    }

    for (int r = 0; r < rounds; r++) {
        int root = r % size;
        struct msg msgs[MAX_OUT];
        MPI_Request reqs[MAX_OUT];
        int out = 0;

        /* overlap */
        for (size_t n = 1; n <= max_bytes && out + 4 <= MAX_OUT; n = n < 1024 ? 1024 : n * 4) {
            for (int strided = 0; strided < 2; strided++) {
                MPI_Comm comm = (out / 2) % 2 ? dup : MPI_COMM_WORLD;
                struct msg *m = &msgs[out];
                msg_init(m, ++call, n, strided, rank == root);
                MPI_Ibcast(m->buf, m->count, m->type, root, comm, &reqs[out]);
                out++;
            }
        }
        compute(reqs, out);
        MPI_Waitall(out, reqs, MPI_STATUSES_IGNORE);
        for (int i = 0; i < out; i++) msg_check(&msgs[i], "overlap");

        /* mixed */
        {
            struct msg a, b;
            MPI_Request req;
            size_t n = max_bytes < 65536 ? max_bytes : 65536;
            msg_init(&a, ++call, n, 0, rank == root);
            msg_init(&b, ++call, n / 2 + 1, 1, rank == (root + 1) % size);
            MPI_Ibcast(a.buf, a.count, a.type, root, MPI_COMM_WORLD, &req);
            MPI_Bcast(b.buf, b.count, b.type, (root + 1) % size, MPI_COMM_WORLD);
            msg_check(&b, "mixed bcast");
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            msg_check(&a, "mixed ibcast");
        }

        /* freed */
        {
            struct msg a;
            MPI_Request req;
            MPI_Comm freed;
            MPI_Comm_dup(MPI_COMM_WORLD, &freed);
            MPI_Comm_set_name(freed, "freed");
            if (split_first) MPI_Barrier(freed);
            msg_init(&a, ++call, max_bytes < 4096 ? max_bytes : 4096, 0, rank == root);
            MPI_Ibcast(a.buf, a.count, a.type, root, freed, &req);
            MPI_Comm_free(&freed);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            msg_check(&a, "freed");
        }

        /* bottom */
        for (int halves = 0; halves < 2; halves++) {
            struct msg a;
            MPI_Request req;
            MPI_Datatype type;
            int from = (root + 2) % size;
            size_t n = max_bytes < 65536 ? max_bytes : 65536;
            MPI_Aint base;
            msg_init(&a, ++call, n, 0, rank == from);
            MPI_Get_address(a.buf, &base);
            /* One block, or the two halves with the second first. */
            MPI_Aint at[2] = {halves ? MPI_Aint_add(base, (MPI_Aint) (n / 2)) : base, base};
            int len[2] = {(int) (halves ? n - n / 2 : n), (int) (n / 2)};
            MPI_Type_create_hindexed(halves ? 2 : 1, len, at, MPI_BYTE, &type);
            MPI_Type_commit(&type);
            MPI_Ibcast(MPI_BOTTOM, 1, type, from, dup, &req);
            compute(&req, 1);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            MPI_Type_free(&type);
            msg_check(&a, "bottom");
        }
    }
    MPI_Comm_free(&dup);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("ibcast_check: PASS\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
