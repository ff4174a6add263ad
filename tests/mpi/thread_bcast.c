/*
 * Broadcasts on two communicators at the same time from two threads
 * (MPI_THREAD_MULTIPLE), every byte checked on every rank.
 *
 *   thread_bcast [CALLS [bcast|ibcast]]
 *
 * Two dups of MPI_COMM_WORLD, named "t0" and "t1"; thread k makes CALLS
 * (default 300) broadcasts on "tk" with sizes from 1 byte to 256 KiB and
 * changing roots: MPI_Bcast, or with "ibcast" MPI_Ibcast and MPI_Wait. Prints "thread_bcast: comm=tK rank=R bcasts=N bytes=B" per
 * thread and rank, and "thread_bcast: PASS" on rank 0 when every rank
 * received exactly the root's bytes.
 */
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SENTINEL 0xEE
#define MAX_BYTES (256 * 1024)

static long calls = 300;
static int nonblocking = 0;

typedef struct {
    int id;
    MPI_Comm comm;
    long bcasts;
    long long bytes;
} job_t;

static unsigned char pattern(int id, long call, size_t i)
{
    uint64_t x = (uint64_t) call * 0x9E3779B97F4A7C15ull + (uint64_t) (id + 1) * 0x94D049BB133111EBull +
                 i * 0xBF58476D1CE4E5B9ull;
    return (unsigned char) (x >> 29) ^ (unsigned char) i;
}

/* Sizes cycle through small, fragment-sized, odd and large messages. */
static size_t size_of(int id, long call)
{
    static const size_t sizes[] = {1, 7, 255, 4096, 4097, 12289, 65536, 100000, 200001, MAX_BYTES};
    size_t n = sizes[(call * 3 + id) % (sizeof sizes / sizeof sizes[0])];
    return n > 1 ? n - (size_t) (call % 3) : n;
}

static void *run(void *arg)
{
    job_t *job = arg;
    int rank, size;
    unsigned char *buf = malloc(MAX_BYTES);
    if (!buf) {
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Comm_rank(job->comm, &rank);
    MPI_Comm_size(job->comm, &size);
    for (long c = 0; c < calls; c++) {
        int root = (int) ((c * 5 + job->id) % size);
        size_t n = size_of(job->id, c);
        for (size_t i = 0; i < n; i++) {
            buf[i] = rank == root ? pattern(job->id, c, i) : SENTINEL;
        }
        if (nonblocking) {
            MPI_Request req;
            MPI_Ibcast(buf, (int) n, MPI_BYTE, root, job->comm, &req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Bcast(buf, (int) n, MPI_BYTE, root, job->comm);
        }
        for (size_t i = 0; i < n; i++) {
            if (buf[i] != pattern(job->id, c, i)) {
                fprintf(stderr, "thread_bcast: FAIL comm=t%d rank=%d call=%ld root=%d bytes=%zu "
                                "wrong byte at %zu\n",
                        job->id, rank, c, root, n, i);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
        }
        job->bcasts++;
        job->bytes += (long long) n;
    }
    free(buf);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided, rank;
    job_t jobs[2];
    pthread_t threads[2];

    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (provided < MPI_THREAD_MULTIPLE) {
        fprintf(stderr, "thread_bcast: FAIL: MPI_THREAD_MULTIPLE requested, %d provided\n",
                provided);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    if (argc > 1) {
        calls = strtol(argv[1], NULL, 0);
    }
    if (argc > 2) {
        nonblocking = 0 == strcmp(argv[2], "ibcast");
        if (!nonblocking && 0 != strcmp(argv[2], "bcast")) {
            fprintf(stderr, "usage: thread_bcast [CALLS [bcast|ibcast]]\n");
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    for (int k = 0; k < 2; k++) {
        char name[8];
        jobs[k] = (job_t){.id = k, .bcasts = 0, .bytes = 0};
        MPI_Comm_dup(MPI_COMM_WORLD, &jobs[k].comm);
        snprintf(name, sizeof name, "t%d", k);
        MPI_Comm_set_name(jobs[k].comm, name);
    }
    for (int k = 0; k < 2; k++) {
        if (pthread_create(&threads[k], NULL, run, &jobs[k]) != 0) {
            fprintf(stderr, "thread_bcast: FAIL: pthread_create\n");
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(threads[k], NULL);
    }
    for (int k = 0; k < 2; k++) {
        printf("thread_bcast: comm=t%d rank=%d bcasts=%ld bytes=%lld\n", k, rank, jobs[k].bcasts,
               jobs[k].bytes);
        MPI_Comm_free(&jobs[k].comm);
    }
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("thread_bcast: PASS\n");
        fflush(stdout);
    }
    MPI_Finalize();
    return 0;
}
