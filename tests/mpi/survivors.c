/*
 * A fault-tolerant program (User-Level Failure Mitigation, Open MPI 5.0 run
 * with mpirun --with-ft ulfm): a rank dies between broadcasts; every
 * survivor's next broadcasts return an error (MPIX_ERR_PROC_FAILED, or
 * MPIX_ERR_REVOKED once another survivor revoked the communicator) rather
 * than wait forever; the survivors revoke, shrink, and broadcast on the
 * shrunken communicator, every byte checked.
 *
 *   survivors VICTIM BYTES
 *
 * VICTIM is the rank of MPI_COMM_WORLD that kills itself (SIGKILL) after the
 * first broadcasts; the root of every broadcast is rank 0 of its
 * communicator. Every survivor prints "survivors: rank R rc=CLASS" (the
 * error class its broadcasts ended with); rank 0 of the shrunken
 * communicator prints "survivors: PASS" or "survivors: FAIL". Without the
 * fault-tolerance extension it prints "survivors: no fault tolerance".
 */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && OMPI_HAVE_MPI_EXT_FTMPI

/* Broadcasts `n` bytes of `fill` from rank 0 of `comm`; whether they came. */
static int bcast_checked(MPI_Comm comm, char *buf, int n, char fill, int *rc)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    memset(buf, rank == 0 ? fill : 0, n);
    *rc = MPI_Bcast(buf, n, MPI_BYTE, 0, comm);
    for (int i = 0; i < n; i++) {
        if (buf[i] != fill) {
            return 0;
        }
    }
    return 1;
}

int main(int argc, char **argv)
{
    int size, rank, rc = MPI_SUCCESS, cls = MPI_SUCCESS, bad = 0, total = 0;
    MPI_Comm comm, shrunk;

    MPI_Init(&argc, &argv);
    if (argc != 3) {
        fprintf(stderr, "usage: survivors VICTIM BYTES\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int victim = atoi(argv[1]);
    int n = atoi(argv[2]);
    char *buf = malloc(n);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);

    for (int r = 0; r < 3; r++) {
        bad += !bcast_checked(comm, buf, n, (char) ('a' + r), &rc);
        bad += rc != MPI_SUCCESS;
    }
    MPI_Barrier(comm);
    if (rank == victim) {
        raise(SIGKILL);
    }
    /* Until the failure reaches this rank: a broadcast may still complete
       where the dead rank had no part left in it. */
    for (int r = 0; r < 50 && rc == MPI_SUCCESS; r++) {
        bcast_checked(comm, buf, n, 'x', &rc);
    }
    if (rc != MPI_SUCCESS) {
        MPI_Error_class(rc, &cls);
    }
    printf("survivors: rank %d rc=%d\n", rank, cls);
    fflush(stdout);

    MPIX_Comm_revoke(comm);
    MPIX_Comm_shrink(comm, &shrunk);
    MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
    int shrunk_size, shrunk_rank;
    MPI_Comm_size(shrunk, &shrunk_size);
    MPI_Comm_rank(shrunk, &shrunk_rank);
    for (int r = 0; r < 5; r++) {
        bad += !bcast_checked(shrunk, buf, n, (char) ('k' + r), &rc);
        bad += rc != MPI_SUCCESS;
    }
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, shrunk);
    if (shrunk_rank == 0) {
        printf("survivors: %s (%d of %d ranks survived; %d wrong)\n",
               total == 0 && shrunk_size == size - 1 ? "PASS" : "FAIL", shrunk_size, size, total);
    }
    MPI_Comm_free(&shrunk);
    MPI_Comm_free(&comm);
    free(buf);
    MPI_Finalize();
    return total != 0;
}

#else

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    printf("survivors: no fault tolerance\n");
    MPI_Finalize();
    return 0;
}

#endif
