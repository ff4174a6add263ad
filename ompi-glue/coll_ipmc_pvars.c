/*
 * ipmc's statistics as MPI_T performance variables: coll_ipmc_<counter>,
 * each bound to a communicator. The table and the values are Rust's
 * (ipmc_rs_pvar_*); this registers them and reads them through the module
 * that serves the communicator's broadcast.
 */
#include "ompi_config.h"

#include <stdint.h>

#include "opal/mca/base/mca_base_pvar.h"
#include "ompi/communicator/communicator.h"

#include "coll_ipmc.h"

static int ipmc_pvar_read(const struct mca_base_pvar_t *pvar, void *value, void *obj_handle)
{
    /* Open MPI passes the communicator itself (it dereferences the MPI_Comm *). */
    struct ompi_communicator_t *comm = (struct ompi_communicator_t *) obj_handle;
    struct ipmc_rs_module *rs = NULL == comm ? NULL : mca_coll_ipmc_comm_state(comm);
    /* A communicator ipmc does not serve reads 0 everywhere. */
    uint64_t v = NULL == rs ? 0 : ipmc_rs_pvar_read(rs, (int) (intptr_t) pvar->ctx);

    if (MCA_BASE_VAR_TYPE_INT == pvar->type) {
        *(int *) value = (int) v;
    } else {
        *(unsigned long long *) value = (unsigned long long) v;
    }
    return OPAL_SUCCESS;
}

void mca_coll_ipmc_register_pvars(void)
{
    char name[64], desc[256];
    int kind;

    for (int i = 0; (kind = ipmc_rs_pvar_info(i, name, sizeof(name), desc, sizeof(desc))) >= 0; ++i) {
        bool state = 1 == kind;
        /* A state has no enumerator: its description names the values.
           ompi_info's human-readable dump of a variable with a description
           and an enumerator writes past its array (mca_base_pvar_dump in 4.1
           and 5.0) and crashes. Counters are not continuous: a started handle
           counts from its start. */
        (void) mca_base_component_pvar_register(
            &mca_coll_ipmc_component.collm_version, name, desc, OPAL_INFO_LVL_4,
            state ? MCA_BASE_PVAR_CLASS_STATE : MCA_BASE_PVAR_CLASS_COUNTER,
            state ? MCA_BASE_VAR_TYPE_INT : MCA_BASE_VAR_TYPE_UNSIGNED_LONG_LONG, NULL,
            MCA_BASE_VAR_BIND_MPI_COMM,
            MCA_BASE_PVAR_FLAG_READONLY | (state ? MCA_BASE_PVAR_FLAG_CONTINUOUS : 0),
            ipmc_pvar_read, NULL, NULL, (void *) (intptr_t) i);
    }
}
