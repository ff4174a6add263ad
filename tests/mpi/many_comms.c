/*
 * Keeps many communicators alive at once and broadcasts on each, as a
 * program that makes a communicator per task and frees none may.
 *
 *   many_comms N BYTES [FILES]
 *
 * N times MPI_Comm_dup(MPI_COMM_WORLD), each kept, with a broadcast of BYTES
 * from rank i % size on the i-th as it is made; then one more broadcast on
 * every one of them, from another root; then every one freed. Every byte is
 * checked on every rank. With FILES, every rank opens FILES more files
 * (/dev/null) once the communicators are made, as a program that still needs
 * its own files does, and a file it cannot open fails the run.
 *
 * Prints "many_comms: PASS" (or FAIL, with a non-zero exit) on rank 0.
 */
#include <mpi.h>
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char expected(int round, int comm, int i)
{
    return (unsigned char) (i * 7 + comm * 13 + round * 101);
}

/* One broadcast on `comm` (the c-th) in `round`: returns the bytes wrong. */
static long bcast_checked(MPI_Comm comm, int c, int round, int root, unsigned char *buf, int len)
{
    int rank;
    long wrong = 0;
    MPI_Comm_rank(comm, &rank);
    for (int i = 0; i < len; i++) {
        buf[i] = rank == root ? expected(round, c, i) : 0xEE;
    }
    MPI_Bcast(buf, len, MPI_BYTE, root, comm);
    for (int i = 0; i < len; i++) {
        wrong += buf[i] != expected(round, c, i);
    }
    return wrong;
}

int main(int argc, char **argv)
{
    int rank, size;
    long wrong = 0, all = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int n = argc == 3 || argc == 4 ? atoi(argv[1]) : 0;
    int len = argc == 3 || argc == 4 ? atoi(argv[2]) : 0;
    int files = argc == 4 ? atoi(argv[3]) : 0;
    if (n < 1 || n > 100000 || len < 1 || len > (1 << 30) || files < 0 || files > 100000) {
        if (rank == 0) {
            fprintf(stderr, "usage: many_comms N BYTES [FILES]\n");
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm *comms = malloc(sizeof(MPI_Comm) * (size_t) n);
    unsigned char *buf = malloc((size_t) len);
    int *fds = malloc(sizeof(int) * (size_t) (files + 1));
    if (!comms || !buf || !fds) {
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    for (int c = 0; c < n; c++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &comms[c]);
        wrong += bcast_checked(comms[c], c, 0, c % size, buf, len);
    }
    int opened = 0;
    while (opened < files && (fds[opened] = open("/dev/null", O_RDONLY)) >= 0) {
        opened++;
    }
    if (opened < files) {
        printf("many_comms: rank %d opened %d of %d files: %s\n", rank, opened, files,
               strerror(errno));
        wrong += files - opened;
    }
    for (int c = 0; c < n; c++) {
        wrong += bcast_checked(comms[c], c, 1, (c + 1) % size, buf, len);
    }
    for (int c = 0; c < n; c++) {
        MPI_Comm_free(&comms[c]);
    }
    for (int f = 0; f < opened; f++) {
        close(fds[f]);
    }
    MPI_Reduce(&wrong, &all, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("many_comms: %s (%ld bytes wrong)\n", all == 0 ? "PASS" : "FAIL", all);
    }
    free(fds);
    free(buf);
    free(comms);
    MPI_Finalize();
    return all == 0 ? 0 : 1;
}
