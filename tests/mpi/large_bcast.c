/*
 * Broadcasts one large contiguous message from each of two roots and
 * reports how much each process's peak resident memory grew in those
 * broadcasts beyond the buffer the program holds: the memory the broadcast
 * took for the message.
 *
 *   large_bcast MIB [ibcast]
 *
 * The message is MIB elements of a contiguous datatype of 1 MiB, so that it
 * may exceed the 2 GiB an int count of bytes can describe. With "ibcast",
 * each broadcast is an MPI_Ibcast waited for.
 *
 * Prints "large_bcast: rank=R grew_kib=K" per rank and "large_bcast: PASS"
 * on rank 0 when every rank received exactly the root's bytes.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* VmHWM of this process, in KiB. */
static long peak_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

static unsigned char byte_at(size_t i, int root)
{
    return (unsigned char)(i * 7 + (i >> 16) + (i >> 31) * 13 + root);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int mib = argc > 1 ? atoi(argv[1]) : 64;
    size_t n = (size_t)mib << 20;
    int nonblocking = argc > 2 && !strcmp(argv[2], "ibcast");
    MPI_Datatype one_mib;
    MPI_Type_contiguous(1 << 20, MPI_BYTE, &one_mib);
    MPI_Type_commit(&one_mib);
    unsigned char *buf = malloc(n);
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 2);
    memset(buf, 0, n);
    /* The communicator's multicast group is set up before the measure. */
    MPI_Bcast(buf, 1000, MPI_BYTE, 0, MPI_COMM_WORLD);
    long before = peak_kib();
    long wrong = 0;
    for (int root = 0; root < 2 && root < size; root++) {
        for (size_t i = 0; i < n; i++)
            buf[i] = rank == root ? byte_at(i, root) : 0;
        if (nonblocking) {
            MPI_Request request;
            MPI_Ibcast(buf, mib, one_mib, root, MPI_COMM_WORLD, &request);
            MPI_Wait(&request, MPI_STATUS_IGNORE);
        } else {
            MPI_Bcast(buf, mib, one_mib, root, MPI_COMM_WORLD);
        }
        for (size_t i = 0; i < n; i++)
            wrong += buf[i] != byte_at(i, root);
    }
    printf("large_bcast: rank=%d grew_kib=%ld\n", rank, peak_kib() - before);
    fflush(stdout);
    long total;
    MPI_Allreduce(&wrong, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("large_bcast: %s (%ld wrong bytes)\n", total ? "FAIL" : "PASS", total);
    free(buf);
    MPI_Type_free(&one_mib);
    MPI_Finalize();
    return total != 0;
}
