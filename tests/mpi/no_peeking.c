/*
 * no_peeking RANK PROGRAM [ARGS...]
 *
 * Runs PROGRAM; on MPI_COMM_WORLD rank RANK (mpirun sets
 * OMPI_COMM_WORLD_RANK) it first installs a seccomp filter under which
 * process_vm_readv(2) fails with EPERM, as it does in a container under
 * Docker's default profile or for another user's process under Yama's
 * ptrace_scope 1: that rank cannot read another process's memory, while
 * every other system call works as before.
 */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int forbid_process_vm_readv(void)
{
    /* The machine's own architecture only: the wrapper runs the test's
     * programs, built for it. */
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {
        .len = sizeof filter / sizeof filter[0],
        .filter = filter,
    };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: no_peeking RANK PROGRAM [ARGS...]\n");
        return 2;
    }
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (rank != NULL && strcmp(rank, argv[1]) == 0 && forbid_process_vm_readv() != 0) {
        perror("no_peeking: seccomp");
        return 1;
    }
    execvp(argv[2], argv + 2);
    perror("no_peeking: exec");
    return 127;
}
