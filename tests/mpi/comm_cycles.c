/*
 * Creates, uses and frees a communicator many times, and checks that what
 * the broadcast sets up per communicator (sockets, multicast memberships)
 * does not pile up: a freed communicator's group is kept for the next one of
 * the same processes, which takes it over, and nothing else outlives it.
 *
 *   comm_cycles N
 *
 * N times: MPI_Comm_dup(MPI_COMM_WORLD), broadcasts of 1 B, 4 KiB and 100 KiB
 * with changing roots (every byte checked on every rank), MPI_Comm_free.
 * After WARMUP cycles and after the last one every rank counts its open file
 * descriptors (/proc/self/fd) and the IPv4 multicast memberships of its
 * network namespace (/proc/self/net/igmp: the sum of the users of every
 * group); neither may have grown. MPI_COMM_WORLD itself never broadcasts.
 *
 * The same counts while the last communicator still lives, against those
 * before the first (MPI_COMM_WORLD's own group set up), show that they see
 * what ipmc opens. MPI lets a freed communicator live on until its
 * pending operations end (ipmc may finish a broadcast in the background), so
 * every count is taken after every rank has driven MPI's progress a while.
 *
 * Prints "comm_cycles: fds=A->B memberships=C->D live_fds=E live_memberships=F
 * start_fds=G start_memberships=H rank=R" per rank and
 * "comm_cycles: PASS" (or FAIL, with a non-zero exit) on rank 0.
 */
#include <dirent.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WARMUP 20
#define SENTINEL 0xEE

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;
    if (!d) {
        perror("comm_cycles: /proc/self/fd");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    while ((e = readdir(d)) != NULL) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

/* What descriptor `fd` refers to, in `out` (empty where it is closed). */
static void fd_target(int fd, char *out, size_t len)
{
    char path[64];
    ssize_t n;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    n = readlink(path, out, len - 1);
    out[n > 0 ? n : 0] = '\0';
}

#define WATCHED_FDS 256
static char warm_targets[WATCHED_FDS][128];

/* Notes what descriptors 0 .. WATCHED_FDS - 1 refer to after the warm-up. */
static void note_targets(void)
{
    for (int fd = 0; fd < WATCHED_FDS; fd++) {
        fd_target(fd, warm_targets[fd], sizeof warm_targets[fd]);
    }
}

/* The /proc/self/net table ("udp", "tcp6", ...) that lists socket `inode`,
   or "?". */
static const char *socket_table(const char *target)
{
    static const char *tables[] = {"udp", "udp6", "tcp", "tcp6", "unix"};
    unsigned long inode;
    if (sscanf(target, "socket:[%lu]", &inode) != 1) {
        return "";
    }
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++) {
        char path[64], line[512], word[32];
        FILE *f;
        snprintf(path, sizeof path, "/proc/self/net/%s", tables[t]);
        f = fopen(path, "r");
        if (!f) {
            continue;
        }
        snprintf(word, sizeof word, " %lu ", inode);
        while (fgets(line, sizeof line, f)) {
            if (strstr(line, word)) {
                fclose(f);
                return tables[t];
            }
        }
        fclose(f);
    }
    return "?";
}

/* Names the descriptors opened or reused since `note_targets`, so that a
   failure says what grew. */
static void print_new_targets(int rank)
{
    char now[128];
    for (int fd = 0; fd < WATCHED_FDS; fd++) {
        fd_target(fd, now, sizeof now);
        if (now[0] && strcmp(now, warm_targets[fd]) != 0) {
            fprintf(stderr, "comm_cycles: rank %d: descriptor %d is %s %s (after the warm-up: %s)\n",
                    rank, fd, now, socket_table(now), warm_targets[fd][0] ? warm_targets[fd] : "closed");
        }
    }
}

/* Sum of the "Users" column of the group lines of /proc/self/net/igmp. */
static long memberships(void)
{
    FILE *f = fopen("/proc/self/net/igmp", "r");
    char line[512];
    long users = 0;
    if (!f) {
        perror("comm_cycles: /proc/self/net/igmp");
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    while (fgets(line, sizeof line, f)) {
        unsigned int group;
        long u;
        /* Group lines start with white space: "\t\t\t\tGROUP USERS TIMER REPORTER". */
        if ((line[0] == ' ' || line[0] == '\t') && sscanf(line, " %x %ld", &group, &u) == 2) {
            users += u;
        }
    }
    fclose(f);
    return users;
}

static unsigned char pattern(long cycle, int k, size_t i)
{
    uint64_t x = (uint64_t) cycle * 0x9E3779B97F4A7C15ull + (uint64_t) k * 0x94D049BB133111EBull +
                 i * 0xBF58476D1CE4E5B9ull;
    return (unsigned char) (x >> 29) ^ (unsigned char) i;
}

static void check_bcast(MPI_Comm comm, long cycle, int k, int root, size_t n, unsigned char *buf)
{
    int rank;
    MPI_Comm_rank(comm, &rank);
    for (size_t i = 0; i < n; i++) {
        buf[i] = rank == root ? pattern(cycle, k, i) : SENTINEL;
    }
    MPI_Bcast(buf, (int) n, MPI_BYTE, root, comm);
    for (size_t i = 0; i < n; i++) {
        if (buf[i] != pattern(cycle, k, i)) {
            fprintf(stderr, "comm_cycles: FAIL rank=%d cycle=%ld bcast=%d root=%d bytes=%zu "
                            "wrong byte at %zu\n",
                    rank, cycle, k, root, n, i);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
}

/* Every rank drives MPI's progress for a while between two barriers, so that
   broadcasts finishing in the background (and their freed communicators)
   end everywhere before a count. */
static void settle(void)
{
    int flag;
    double until;
    MPI_Barrier(MPI_COMM_WORLD);
    until = MPI_Wtime() + 0.2;
    while (MPI_Wtime() < until) {
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1, 4096, 102400};
    int rank, size, fds0 = 0, fds1, fds_live = 0, fds_start, ok, all_ok;
    long cycles, mem0 = 0, mem1, mem_live = 0, mem_start;
    unsigned char *buf;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cycles = argc > 1 ? strtol(argv[1], NULL, 0) : 0;
    if (argc != 2 || cycles < WARMUP) {
        if (rank == 0) {
            fprintf(stderr, "usage: comm_cycles N (N >= %d)\n", WARMUP);
        }
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    buf = malloc(sizes[2]);
    if (!buf) {
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    settle();
    fds_start = open_fds();
    mem_start = memberships();
    MPI_Barrier(MPI_COMM_WORLD);

    for (long c = 0; c < cycles; c++) {
        MPI_Comm dup;
        MPI_Comm_dup(MPI_COMM_WORLD, &dup);
        for (int k = 0; k < 3; k++) {
            check_bcast(dup, c, k, (int) ((c + k) % size), sizes[k], buf);
        }
        if (c + 1 == cycles) {
            /* While the communicator lives: shows that the counts see it. */
            MPI_Barrier(MPI_COMM_WORLD);
            fds_live = open_fds();
            mem_live = memberships();
            MPI_Barrier(MPI_COMM_WORLD);
        }
        MPI_Comm_free(&dup);
        if (c + 1 == WARMUP) {
            /* Every rank of the namespace has freed its communicator. */
            settle();
            fds0 = open_fds();
            mem0 = memberships();
            note_targets();
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    settle();
    fds1 = open_fds();
    mem1 = memberships();
    MPI_Barrier(MPI_COMM_WORLD);
    free(buf);

    ok = fds1 <= fds0 && mem1 <= mem0;
    printf("comm_cycles: fds=%d->%d memberships=%ld->%ld live_fds=%d live_memberships=%ld "
           "start_fds=%d start_memberships=%ld rank=%d\n",
           fds0, fds1, mem0, mem1, fds_live, mem_live, fds_start, mem_start, rank);
    if (!ok) {
        fprintf(stderr, "comm_cycles: rank %d: %s grew over %ld cycles\n", rank,
                fds1 > fds0 ? "open file descriptors" : "multicast memberships", cycles - WARMUP);
        print_new_targets(rank);
    }
    fflush(stdout);
    fflush(stderr);
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0) {
        printf("comm_cycles: %s\n", all_ok ? "PASS" : "FAIL");
        fflush(stdout);
    }
    MPI_Finalize();
    return all_ok ? 0 : 1;
}
