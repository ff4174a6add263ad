/*
 * Checks MPI_Bcast where the ranks describe one message with different
 * datatypes of the same type signature, which MPI allows (MPI-4.1 §6.1):
 * the root passes one element of a contiguous type of n ints, the other
 * ranks n MPI_INT (odd ranks of the communicator) or one element of a vector
 * of n ints with a hole after each (even ranks), whose holes must stay as
 * they were.
 *
 *   mixed_types [--max-bytes N] [--rounds R]
 *
 * --max-bytes  largest message (default 1048576): sizes from 4 bytes up, each
 *              4 times and a little more than the one before, and the largest
 * --rounds     times every size is broadcast, from every root in turn (default 24,
 *              enough for ipmc's measured choice to try each of its candidates)
 *
 * The sizes take turns, so that every size class is measured while the
 * others are. Prints "mixed_types: PASS bcasts=N" on rank 0 of
 * MPI_COMM_WORLD when every rank received exactly the root's ints; exits
 * non-zero otherwise.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HOLE = -1 };

int main(int argc, char **argv)
{
    long max_bytes = 1048576;
    int rounds = 24;
    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--max-bytes") == 0) {
            max_bytes = atol(argv[i + 1]);
        } else if (strcmp(argv[i], "--rounds") == 0) {
            rounds = atoi(argv[i + 1]);
        } else {
            fprintf(stderr, "mixed_types: unknown option %s\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int ns[32], sizes = 0;
    for (long n = 1; n * 4 < max_bytes && sizes < 31; n = n * 4 + 1) {
        ns[sizes++] = (int) n;
    }
    ns[sizes++] = (int) (max_bytes / 4);

    long bcasts = 0;
    int *buf = malloc(2 * sizeof(int) * (size_t) ns[sizes - 1]);
    for (int round = 0; round < rounds; round++) {
        for (int s = 0; s < sizes; s++) {
            int n = ns[s], root = (round + s) % size, count;
            MPI_Datatype type;
            if (rank == root) {
                MPI_Type_contiguous(n, MPI_INT, &type);
                count = 1;
            } else if (rank % 2) {
                MPI_Type_dup(MPI_INT, &type);
                count = n;
            } else {
                MPI_Type_vector(n, 1, 2, MPI_INT, &type);
                count = 1;
            }
            MPI_Type_commit(&type);
            int stride = rank != root && rank % 2 == 0 ? 2 : 1;
            for (int i = 0; i < 2 * n; i++) {
                buf[i] = rank == root ? i * 7 + round : HOLE;
            }
            MPI_Bcast(buf, count, type, root, MPI_COMM_WORLD);
            for (int i = 0; i < n; i++) {
                int want = i * 7 + round;
                if (buf[i * stride] != want || (stride == 2 && buf[2 * i + 1] != HOLE)) {
                    fprintf(stderr,
                            "mixed_types: rank %d: round %d, %d ints from root %d: int %d is %d, "
                            "not %d\n",
                            rank, round, n, root, i, buf[i * stride], want);
                    MPI_Abort(MPI_COMM_WORLD, 1);
                }
            }
            MPI_Type_free(&type);
            bcasts++;
        }
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("mixed_types: PASS bcasts=%ld\n", bcasts);
    }
    MPI_Finalize();
    return 0;
}
