/*
 * ipmc's counters of a communicator, read through MPI_T (its coll_ipmc_*
 * performance variables), for the benchmarks: started after MPI_Init, printed
 * by rank 0 at the end as one line
 *
 *   ipmc_counters: coll_ipmc_bcasts=N coll_ipmc_multicast_bcasts=N ...
 *
 * (every counter, none of the state variables), so that a comparison learns
 * what ipmc did without its statistics lines. Where ipmc is not loaded there
 * is no such variable and nothing is printed.
 */
#ifndef IPMC_COUNTERS_H
#define IPMC_COUNTERS_H

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define IPMC_COUNTERS_MAX 128

static struct {
    int n;
    char names[IPMC_COUNTERS_MAX][96];
    MPI_T_pvar_session session;
    MPI_T_pvar_handle handles[IPMC_COUNTERS_MAX];
} ipmc_counters;

/* Starts every coll_ipmc_ counter on `comm`; quietly none where MPI_T or
   ipmc is missing. */
static void ipmc_counters_start(MPI_Comm *comm)
{
    int provided, num;
    if (MPI_SUCCESS != MPI_T_init_thread(MPI_THREAD_SINGLE, &provided)
        || MPI_SUCCESS != MPI_T_pvar_get_num(&num)
        || MPI_SUCCESS != MPI_T_pvar_session_create(&ipmc_counters.session)) {
        return;
    }
    for (int i = 0; i < num && ipmc_counters.n < IPMC_COUNTERS_MAX; ++i) {
        char name[96], desc[8];
        int name_len = sizeof(name), desc_len = sizeof(desc), verbosity, var_class, bind,
            readonly, continuous, atomic, count;
        MPI_Datatype dt;
        MPI_T_enum enumtype;
        if (MPI_SUCCESS != MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &var_class, &dt,
                                               &enumtype, desc, &desc_len, &bind, &readonly,
                                               &continuous, &atomic)
            || 0 != strncmp(name, "coll_ipmc_", 10) || MPI_T_PVAR_CLASS_COUNTER != var_class
            || MPI_UNSIGNED_LONG_LONG != dt) {
            continue;
        }
        MPI_T_pvar_handle *h = &ipmc_counters.handles[ipmc_counters.n];
        if (MPI_SUCCESS != MPI_T_pvar_handle_alloc(ipmc_counters.session, i, comm, h, &count)
            || (!continuous && MPI_SUCCESS != MPI_T_pvar_start(ipmc_counters.session, *h))) {
            continue;
        }
        strcpy(ipmc_counters.names[ipmc_counters.n++], name);
    }
}

/* Rank 0's line of every counter started by ipmc_counters_start. */
static void ipmc_counters_print(int rank)
{
    if (0 != rank || 0 == ipmc_counters.n) {
        return;
    }
    printf("ipmc_counters:");
    for (int i = 0; i < ipmc_counters.n; ++i) {
        unsigned long long v = 0;
        (void) MPI_T_pvar_read(ipmc_counters.session, ipmc_counters.handles[i], &v);
        printf(" %s=%llu", ipmc_counters.names[i], v);
    }
    printf("\n");
    fflush(stdout);
}

#endif /* IPMC_COUNTERS_H */
