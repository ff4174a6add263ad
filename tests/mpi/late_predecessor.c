/*
 * A rank whose predecessor on ipmc's ring enters a broadcast late:
 *
 *   late_predecessor [--bytes N] [--calls C] [--wait-s S] [--ibcast 1]
 *
 * On 3 ranks or more, C times (default 2) a broadcast of N bytes (default
 * 4194304) from rank 0: rank 1 enters it only once rank 2 has returned from
 * it and sent a token, or after S seconds (default 10) without the token.
 * Every rank checks every byte; rank 1 prints "late_predecessor: rank 1
 * entered call K without the token" for each call it entered so, and rank 0
 * prints "late_predecessor: PASS" at the end. A broadcast in which rank 2
 * waits for its predecessor, rank 1, returns only after the S seconds.
 * With --ibcast 1 each rank calls MPI_Ibcast and MPI_Wait instead.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int ibcast;

static void bcast(unsigned char *buf, size_t n)
{
    if (ibcast) {
        MPI_Request req;
        MPI_Ibcast(buf, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else {
        MPI_Bcast(buf, (int) n, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
}

static unsigned char pattern(int call, size_t i)
{
    return (unsigned char) ((call * 131 + i * 7 + (i >> 9)) & 0xff);
}

int main(int argc, char **argv)
{
    size_t n = 4194304;
    int calls = 2, rank, size;
    double wait_s = 10;

    MPI_Init(&argc, &argv);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--bytes")) n = strtoull(argv[i + 1], NULL, 0);
        if (!strcmp(argv[i], "--calls")) calls = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--wait-s")) wait_s = atof(argv[i + 1]);
        if (!strcmp(argv[i], "--ibcast")) ibcast = atoi(argv[i + 1]);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 3) {
        if (rank == 0) fprintf(stderr, "late_predecessor: needs 3 ranks or more\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    unsigned char *buf = malloc(n);
    for (int call = 1; call <= calls; call++) {
        int token = 0;
        if (rank == 1) {
            MPI_Request req;
            int came = 0;
            MPI_Irecv(&token, 1, MPI_INT, 2, 7, MPI_COMM_WORLD, &req);
            for (double t0 = MPI_Wtime(); !came && MPI_Wtime() - t0 < wait_s;) {
                MPI_Test(&req, &came, MPI_STATUS_IGNORE);
                if (!came) usleep(1000);
            }
            if (!came) {
                printf("late_predecessor: rank 1 entered call %d without the token\n", call);
                fflush(stdout);
            }
            memset(buf, 0, n);
            bcast(buf, n);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            if (rank == 0) {
                for (size_t i = 0; i < n; i++) buf[i] = pattern(call, i);
            } else {
                memset(buf, 0, n);
            }
            bcast(buf, n);
            if (rank == 2) MPI_Send(&token, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
        }
        for (size_t i = 0; i < n; i++) {
            if (buf[i] != pattern(call, i)) {
                fprintf(stderr, "late_predecessor: FAIL rank=%d call=%d at byte %zu\n", rank, call,
                        i);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
    }
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("late_predecessor: PASS\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
