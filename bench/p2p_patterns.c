/*
 * Point-to-point patterns that set the simulator's model of Open MPI's TCP
 * transport (docs/simulator.md): what one transfer, two transfers between the
 * same pair, a process relaying, and a ring of sendrecv steps cost on the
 * emulated cluster.
 *
 *   p2p_patterns oneway   BYTES [ROUNDS]   rank 0 sends to rank 1
 *   p2p_patterns exchange BYTES [ROUNDS]   ranks 0 and 1 send each other BYTES at once:
 *                                          ROUNDS on the connection as it is, then
 *                                          ROUNDS more after rank 0 sent rank 1
 *                                          BYTES (TCP's window then has grown one way)
 *   p2p_patterns relay    BYTES [ROUNDS]   rank 1 receives from 0 while it sends to 2
 *   p2p_patterns ring     BYTES [ROUNDS] [K]
 *                                          ranks 0 .. K-1 (default: all) run K-1
 *                                          sendrecv steps of BYTES around a ring
 *                                          (right, left); the others wait
 *
 * Each round starts after a barrier; rank 0 prints the best round of the
 * slowest rank, in ms (for the ring also per step; for the exchange before
 * and after the one-way transfer).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fprintf(stderr, "usage: p2p_patterns oneway|exchange|relay|ring BYTES [ROUNDS] [K]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    if (argc < 3) {
        usage();
    }
    const char *mode = argv[1];
    size_t n = strtoul(argv[2], NULL, 0);
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    int k = argc > 4 ? atoi(argv[4]) : p;
    int ring = !strcmp(mode, "ring");
    int need = ring ? 2 : !strcmp(mode, "relay") ? 3 : 2;
    if (n == 0 || rounds < 1 || p < need || k < 2 || k > p
        || (!ring && strcmp(mode, "oneway") && strcmp(mode, "exchange") && strcmp(mode, "relay"))) {
        usage();
    }
    size_t blocks = ring ? (size_t) k : 1;
    char *out = malloc(n * blocks), *in = malloc(n);
    if (!out || !in) {
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    memset(out, rank, n * blocks);
    MPI_Comm w = MPI_COMM_WORLD;
    int exchange = !strcmp(mode, "exchange");
    double best = 1e30, fresh = 0;
    for (int r = 0; r < (exchange ? 2 * rounds : rounds); r++) {
        if (exchange && r == rounds) {
            fresh = best;
            best = 1e30;
            if (rank == 0) {
                MPI_Send(out, (int) n, MPI_BYTE, 1, 2, w);
            } else if (rank == 1) {
                MPI_Recv(in, (int) n, MPI_BYTE, 0, 2, w, MPI_STATUS_IGNORE);
            }
        }
        MPI_Barrier(w);
        double t = MPI_Wtime();
        if (!strcmp(mode, "oneway")) {
            if (rank == 0) {
                MPI_Send(out, (int) n, MPI_BYTE, 1, 1, w);
            } else if (rank == 1) {
                MPI_Recv(in, (int) n, MPI_BYTE, 0, 1, w, MPI_STATUS_IGNORE);
            }
        } else if (exchange) {
            if (rank < 2) {
                MPI_Sendrecv(out, (int) n, MPI_BYTE, 1 - rank, 1, in, (int) n, MPI_BYTE, 1 - rank, 1, w,
                             MPI_STATUS_IGNORE);
            }
        } else if (!strcmp(mode, "relay")) {
            if (rank == 0) {
                MPI_Send(out, (int) n, MPI_BYTE, 1, 1, w);
            } else if (rank == 2) {
                MPI_Recv(in, (int) n, MPI_BYTE, 1, 1, w, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                MPI_Request q[2];
                MPI_Irecv(in, (int) n, MPI_BYTE, 0, 1, w, &q[0]);
                MPI_Isend(out, (int) n, MPI_BYTE, 2, 1, w, &q[1]);
                MPI_Waitall(2, q, MPI_STATUSES_IGNORE);
            }
        } else if (rank < k) {
            int right = (rank + 1) % k, left = (rank + k - 1) % k;
            for (int s = 1; s < k; s++) {
                char *send = out + (size_t) ((rank - s + 1 + k) % k) * n;
                char *recv = out + (size_t) ((rank - s + k) % k) * n;
                MPI_Sendrecv(send, (int) n, MPI_BYTE, right, 1, recv, (int) n, MPI_BYTE, left, 1, w,
                             MPI_STATUS_IGNORE);
            }
        }
        t = MPI_Wtime() - t;
        double slowest;
        MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, w);
        if (slowest < best) {
            best = slowest;
        }
    }
    if (rank == 0) {
        printf("%s bytes=%zu processes=%d", mode, n, p);
        if (ring) {
            printf(" members=%d per_step_ms=%.2f", k, best * 1e3 / (k - 1));
        }
        if (exchange) {
            printf(" fresh_ms=%.2f after_one_way", fresh * 1e3);
        }
        printf(" best_ms=%.2f\n", best * 1e3);
    }
    free(out);
    free(in);
    MPI_Finalize();
    return 0;
}
