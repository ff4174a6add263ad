/* Sessions one after another, each making a communicator of the same
 * processes, duplicating and freeing it, and broadcasting on the copies.
 * A session held open throughout keeps Open MPI itself initialized: 5.0.7's
 * TCP transport cannot connect again once its last session has ended. */
#include <mpi.h>
#include <stdio.h>

static unsigned char buf[1 << 16];

static long session_round(int it, int *rank)
{
    MPI_Session s;
    MPI_Group g;
    MPI_Comm c, d;
    long bad = 0, all = 0;
    if (MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &s)) return 1;
    MPI_Group_from_session_pset(s, "mpi://WORLD", &g);
    MPI_Comm_create_from_group(g, "ipmc.again", MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &c);
    int size;
    MPI_Comm_rank(c, rank);
    MPI_Comm_size(c, &size);
    for (int k = 0; k < 3; k++) {
        MPI_Comm_dup(c, &d);
        for (int j = 0; j < 5; j++) {
            int n = 4096, root = (j + k) % size;
            for (int i = 0; i < n; i++) buf[i] = *rank == root ? (unsigned char)(i + j + it) : 0xEE;
            MPI_Bcast(buf, n, MPI_BYTE, root, d);
            for (int i = 0; i < n; i++) bad += buf[i] != (unsigned char)(i + j + it);
        }
        MPI_Comm_free(&d);
    }
    MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, c);
    MPI_Comm_free(&c);
    MPI_Group_free(&g);
    MPI_Session_finalize(&s);
    return all;
}

int main(void)
{
    MPI_Session keeper;
    long bad = 0;
    int rank = 0;
    if (MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &keeper)) return 1;
    for (int it = 0; it < 3; it++) bad += session_round(it, &rank);
    MPI_Session_finalize(&keeper);
    if (rank == 0) printf("sessions_again: %s (%ld wrong)\n", bad ? "FAIL" : "PASS", bad);
    return bad != 0;
}
