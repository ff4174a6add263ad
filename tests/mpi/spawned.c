/*
 * A job that starts more processes (MPI_Comm_spawn) and then runs collectives
 * with them on one communicator: the parents' and the children's
 * MPI_COMM_WORLD merged (MPI_Intercomm_merge), named "merged".
 *
 *   spawned CHILDREN [MAX_BYTES]
 *
 * The parents spawn CHILDREN copies of this program. Every child's MPI_Init
 * connects to the parents with broadcasts on its own MPI_COMM_WORLD, so the
 * children's first broadcasts run inside MPI_Init. On the merged
 * communicator: broadcasts from every root of 1 byte, 4 KiB, 64 KiB and
 * MAX_BYTES (default 1,048,576), an MPI_Ibcast, an MPI_Allgather of 1 KiB
 * blocks and an MPI_Barrier; every byte is checked on every rank.
 *
 * Prints "spawned: PASS size=N" (or FAIL, with a non-zero exit) on rank 0 of
 * the merged communicator.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned char expected(int root, int len, int i)
{
    return (unsigned char) (i * 31 + root * 7 + len);
}

/* One broadcast of len bytes from root: the bytes that arrived wrong. */
static long bcast_checked(MPI_Comm comm, int root, int len, int nonblocking)
{
    int rank;
    long wrong = 0;
    MPI_Comm_rank(comm, &rank);
    unsigned char *buf = malloc(len);
    for (int i = 0; i < len; i++) {
        buf[i] = rank == root ? expected(root, len, i) : 0xEE;
    }
    if (nonblocking) {
        MPI_Request req;
        MPI_Ibcast(buf, len, MPI_BYTE, root, comm, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        MPI_Bcast(buf, len, MPI_BYTE, root, comm);
    }
    for (int i = 0; i < len; i++) {
        wrong += buf[i] != expected(root, len, i);
    }
    free(buf);
    return wrong;
}

/* An allgather of blocks of block ints: the ints that arrived wrong. */
static long allgather_checked(MPI_Comm comm, int block)
{
    int rank, size;
    long wrong = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    int *mine = malloc(block * sizeof *mine);
    int *all = malloc((size_t) size * block * sizeof *all);
    for (int i = 0; i < block; i++) {
        mine[i] = rank * 100000 + i;
    }
    for (int i = 0; i < size * block; i++) {
        all[i] = -1;
    }
    MPI_Allgather(mine, block, MPI_INT, all, block, MPI_INT, comm);
    for (int r = 0; r < size; r++) {
        for (int i = 0; i < block; i++) {
            wrong += all[r * block + i] != r * 100000 + i;
        }
    }
    free(mine);
    free(all);
    return wrong;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: spawned CHILDREN [MAX_BYTES]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int children = atoi(argv[1]);
    int max_bytes = argc > 2 ? atoi(argv[2]) : 1048576;
    MPI_Comm parent, inter, merged;
    MPI_Comm_get_parent(&parent);
    if (MPI_COMM_NULL == parent) {
        char *child_argv[] = {argv[1], argc > 2 ? argv[2] : NULL, NULL};
        MPI_Comm_spawn(argv[0], child_argv, children, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                       MPI_ERRCODES_IGNORE);
    } else {
        inter = parent;
    }
    /* The parents first. */
    MPI_Intercomm_merge(inter, MPI_COMM_NULL != parent, &merged);
    MPI_Comm_set_name(merged, "merged");
    int rank, size;
    MPI_Comm_rank(merged, &rank);
    MPI_Comm_size(merged, &size);

    const int sizes[] = {1, 4096, 65536, max_bytes};
    long wrong = 0;
    for (int root = 0; root < size; root++) {
        for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            wrong += bcast_checked(merged, root, sizes[s], 0);
        }
    }
    wrong += bcast_checked(merged, size - 1, 65536, 1);
    wrong += allgather_checked(merged, 256);
    MPI_Barrier(merged);

    long all = 0;
    MPI_Allreduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, merged);
    if (0 == rank) {
        printf("spawned: %s size=%d wrong=%ld\n", all ? "FAIL" : "PASS", size, all);
    }
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    MPI_Finalize();
    return all != 0;
}
