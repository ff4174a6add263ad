/*
 * Programs that work with Open MPI's own broadcast for messages it sends
 * eagerly, and that a broadcast which waits for other ranks would hang:
 *
 *   early_return [--max-bytes N] [--ahead AHEAD]
 *
 * For sizes 4 B, 1 KiB, 64 KiB, ... up to N (default 1048576), on every
 * communicator of at least 2 ranks in MPI_COMM_WORLD:
 *   sync     the root broadcasts, then sends a token to rank 1; rank 1 receives
 *            the token before it enters the broadcast;
 *   ahead    with --ahead K (K > 1): the same with K broadcasts before the
 *            token, so that the root runs K broadcasts ahead of rank 1; and
 *            again with rank 2 (not the root) sending the token after its K
 *            broadcasts, on 3 ranks or more;
 *   reuse    the root overwrites its buffer as soon as MPI_Bcast returns;
 *   free     a duplicate of MPI_COMM_WORLD broadcasts in the sync pattern and
 *            is freed at once on every rank.
 * Every rank checks every byte; prints "early_return: PASS" on rank 0. The
 * first sync pattern is each communicator's first broadcast, whose multicast
 * group is agreed from the communicator's creation on.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char pattern(long call, size_t i)
{
    return (unsigned char) ((call * 131 + i * 7 + (i >> 9)) & 0xff);
}

static void check(MPI_Comm comm, const unsigned char *buf, size_t n, long call, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != pattern(call, i)) {
            int rank;
            MPI_Comm_rank(comm, &rank);
            fprintf(stderr, "early_return: FAIL %s rank=%d call=%ld size=%zu at byte %zu\n", what,
                    rank, call, n, i);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
}

/* Root 0 broadcasts `calls` times; rank `sender` then sends rank 1 a token
   that rank 1 waits for before it enters the first of them. */
static void sync_bcast(MPI_Comm comm, unsigned char *buf, size_t n, long call, int calls,
                       int sender)
{
    int rank, token = 42;
    MPI_Comm_rank(comm, &rank);
    if (rank == 1) MPI_Recv(&token, 1, MPI_INT, sender, 7, comm, MPI_STATUS_IGNORE);
    for (int c = 0; c < calls; c++) {
        if (rank == 0) {
            for (size_t i = 0; i < n; i++) buf[i] = pattern(call + c, i);
        } else {
            memset(buf, 0, n);
        }
        MPI_Bcast(buf, (int) n, MPI_BYTE, 0, comm);
        if (rank != 0) check(comm, buf, n, call + c, calls > 1 ? "ahead" : "sync");
    }
    if (rank == sender) MPI_Send(&token, 1, MPI_INT, 1, 7, comm);
}

int main(int argc, char **argv)
{
    size_t max_bytes = 1048576;
    int rank, size, ahead = 0;
    long call = 0;

    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--max-bytes")) max_bytes = strtoull(argv[i + 1], NULL, 0);
        if (!strcmp(argv[i], "--ahead")) ahead = atoi(argv[i + 1]);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_name(MPI_COMM_WORLD, "world");
    unsigned char *buf = malloc(max_bytes);
    for (size_t n = 4; n <= max_bytes; n = n < 1024 ? 1024 : n * 64) {
        sync_bcast(MPI_COMM_WORLD, buf, n, ++call, 1, 0);
        if (ahead > 1) {
            sync_bcast(MPI_COMM_WORLD, buf, n, call + 1, ahead, 0);
            call += ahead;
        }
        if (ahead > 1 && size >= 3) {
            sync_bcast(MPI_COMM_WORLD, buf, n, call + 1, ahead, 2);
            call += ahead;
        }

        ++call;
        if (rank == 0) {
            for (size_t i = 0; i < n; i++) buf[i] = pattern(call, i);
        }
        MPI_Bcast(buf, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            memset(buf, 0xEE, n);
        } else {
            check(MPI_COMM_WORLD, buf, n, call, "reuse");
        }

        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        MPI_Comm_set_name(dup, "freed");
        sync_bcast(dup, buf, n, ++call, 1, 0);
        MPI_Comm_free(&dup);
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("early_return: PASS\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
