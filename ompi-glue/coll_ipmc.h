/*
 * ipmc: MPI_Bcast over IP multicast for Open MPI's coll framework.
 *
 * The C side of the component: the component structure, the module object and
 * the parameters. Everything else is in Rust (../src), reached through
 * ipmc_glue.h.
 */
#ifndef MCA_COLL_IPMC_EXPORT_H
#define MCA_COLL_IPMC_EXPORT_H

#include "ompi_config.h"

#include "mpi.h"
#include "ompi/mca/coll/coll.h"

#include "ipmc_compat.h"

#include "ipmc_glue.h"

BEGIN_C_DECLS

IPMC_MODULE_DECLSPEC extern const ipmc_coll_component_t mca_coll_ipmc_component;

/* The values of the MCA parameters (storage of the registered variables). */
extern ipmc_config_t mca_coll_ipmc_params;
/* opal_output stream of the component, with the verbosity of coll_ipmc_verbose. */
extern int mca_coll_ipmc_output;

typedef struct mca_coll_ipmc_module_t {
    mca_coll_base_module_t super;
    /* Rust's per-communicator state (owned by Rust, freed by the destructor). */
    struct ipmc_rs_module *rs;
    /* A blocking collective of ipmc's runs on the communicator: one that
       Open MPI itself starts on it meanwhile (ompi_comm_split gathers the
       colors with the communicator's allgather when ipmc splits it into its
       two levels) goes to the replaced component, since `rs` is in use. */
    int in_call;
    /* The broadcast ipmc replaced, kept (and retained) for per-call fallback. */
    mca_coll_base_module_bcast_fn_t prev_bcast;
    mca_coll_base_module_t *prev_bcast_module;
    /* The same for the nonblocking broadcast (NULL: ipmc offers none). */
    mca_coll_base_module_ibcast_fn_t prev_ibcast;
    mca_coll_base_module_t *prev_ibcast_module;
    /* The barrier ipmc replaced (NULL: ipmc serves no barrier). */
    mca_coll_base_module_barrier_fn_t prev_barrier;
    mca_coll_base_module_t *prev_barrier_module;
    /* The allgather ipmc replaced (NULL: ipmc serves no allgather). */
    mca_coll_base_module_allgather_fn_t prev_allgather;
    mca_coll_base_module_t *prev_allgather_module;
    /* The same for MPI_Allgatherv. */
    mca_coll_base_module_allgatherv_fn_t prev_allgatherv;
    mca_coll_base_module_t *prev_allgatherv_module;
} mca_coll_ipmc_module_t;
OBJ_CLASS_DECLARATION(mca_coll_ipmc_module_t);

mca_coll_base_module_t *mca_coll_ipmc_comm_query(struct ompi_communicator_t *comm, int *priority);
/* Rust's state on a communicator whose broadcast ipmc serves, else NULL. */
struct ipmc_rs_module *mca_coll_ipmc_comm_state(struct ompi_communicator_t *comm);
/* MPI_Ibcast: ipmc's, or the replaced component's where ipmc does not serve the call. */
int mca_coll_ipmc_ibcast(void *buf, int count, struct ompi_datatype_t *dt, int root,
                         struct ompi_communicator_t *comm, ompi_request_t **request,
                         mca_coll_base_module_t *module);
/* Sets up `req` as a collective request of ipmc's on `comm` (ipmc_glue.c). */
void mca_coll_ipmc_request_init(ompi_request_t *req, struct ompi_communicator_t *comm,
                                bool persistent);
/* MPI_Bcast_init, whose starts are ipmc's MPI_Ibcast (coll_ipmc_persistent.c). */
int mca_coll_ipmc_bcast_init(void *buf, int count, struct ompi_datatype_t *dt, int root,
                             struct ompi_communicator_t *comm, struct ompi_info_t *info,
                             ompi_request_t **request, mca_coll_base_module_t *module);
/* Completes the persistent broadcasts whose started broadcast completed; the
   number completed. */
int mca_coll_ipmc_persistent_progress(void);
/* Frees the replaced component's requests of the nonblocking broadcasts
   ipmc handed to it that completed, and lets their communicators go
   (coll_ipmc_module.c); the number freed. */
int mca_coll_ipmc_handed_progress(void);
/* Registers the MPI_T performance variables (coll_ipmc_pvars.c). */
void mca_coll_ipmc_register_pvars(void);

END_C_DECLS

#endif /* MCA_COLL_IPMC_EXPORT_H */
