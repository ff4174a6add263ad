/* An erroneous broadcast: the root sends fewer (or more) bytes than the
 * other ranks expect (MPI_Bcast with different counts). ipmc must fail the
 * call with an MPI error on the receivers, never return with part of the
 * buffer unset.
 *
 *   short_bcast ROOT_BYTES OTHER_BYTES [bcast|ibcast]
 *
 * With "ibcast", MPI_Ibcast and MPI_Wait instead of MPI_Bcast.
 *
 * Errors return (MPI_ERRORS_RETURN); each rank prints one line
 * "short_bcast: rank R rc=CLASS" and the job aborts if any rank saw an error,
 * so that no rank waits for a peer that gave up.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, rc, cls = MPI_SUCCESS, any, nonblocking;
    MPI_Request request;
    long root_bytes, other_bytes, n;
    char *buf;

    MPI_Init(&argc, &argv);
    nonblocking = argc == 4 && 0 == strcmp(argv[3], "ibcast");
    if (argc != 3 && !nonblocking && !(argc == 4 && 0 == strcmp(argv[3], "bcast"))) {
        fprintf(stderr, "usage: short_bcast ROOT_BYTES OTHER_BYTES [bcast|ibcast]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    root_bytes = atol(argv[1]);
    other_bytes = atol(argv[2]);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    n = 0 == rank ? root_bytes : other_bytes;
    buf = malloc(n > 0 ? n : 1);
    memset(buf, 0 == rank ? 0x5a : 0, n);
    if (nonblocking) {
        rc = MPI_Ibcast(buf, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD, &request);
        if (MPI_SUCCESS == rc) {
            rc = MPI_Wait(&request, MPI_STATUS_IGNORE);
        }
    } else {
        rc = MPI_Bcast(buf, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    if (MPI_SUCCESS != rc) {
        MPI_Error_class(rc, &cls);
    }
    printf("short_bcast: rank %d rc=%d%s\n", rank, cls, MPI_ERR_TRUNCATE == cls ? " truncate" : "");
    fflush(stdout);
    /* A rank that failed may leave its chain successor waiting: end the job. */
    if (MPI_SUCCESS != rc) {
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    free(buf);
    MPI_Finalize();
    return 0;
}
