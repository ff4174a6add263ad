#include <mpi.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    MPI_Session s;
    MPI_Group g;
    MPI_Comm c;
    if (MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &s)) return 1;
    MPI_Group_from_session_pset(s, "mpi://WORLD", &g);
    MPI_Comm_create_from_group(g, "ipmc.test", MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &c);
    int rank, size;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    static unsigned char buf[1 << 20];
    long bad = 0;
    for (int it = 0; it < 40; it++) {
        int n = (it % 4 == 0) ? 1 : (it % 4 == 1) ? 1000 : (it % 4 == 2) ? 65536 : (1 << 20);
        int root = it % size;
        for (int i = 0; i < n; i++) buf[i] = rank == root ? (unsigned char)(i + it) : 0xEE;
        MPI_Bcast(buf, n, MPI_BYTE, root, c);
        for (int i = 0; i < n; i++) bad += buf[i] != (unsigned char)(i + it);
    }
    MPI_Comm d;
    MPI_Comm_dup(c, &d);
    MPI_Bcast(buf, 100, MPI_BYTE, 0, d);
    MPI_Barrier(d);
    long all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_LONG, MPI_SUM, c);
    if (rank == 0) printf("sessions: %s (%ld wrong)\n", all ? "FAIL" : "PASS", all);
    MPI_Comm_free(&d);
    MPI_Comm_free(&c);
    MPI_Group_free(&g);
    MPI_Session_finalize(&s);
    return all != 0;
}
