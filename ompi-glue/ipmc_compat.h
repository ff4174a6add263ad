/*
 * What differs between the Open MPI series ipmc builds against: 4.1 (coll
 * component 2.0.0, module 2.3.0) and 5.0 (component and module 2.4.0). The
 * series is chosen at compile time from the Open MPI whose headers are used;
 * the rest of the glue and all of Rust are the same for both.
 */
#ifndef IPMC_COMPAT_H
#define IPMC_COMPAT_H

#include "ompi_config.h"

#include "ompi/communicator/communicator.h"

#if OMPI_MAJOR_VERSION >= 6 || (OMPI_MAJOR_VERSION == 5 && OMPI_MINOR_VERSION > 0)
#error "ipmc supports Open MPI 4.1 and 5.0"
#elif OMPI_MAJOR_VERSION == 5
/* 5.0: comm_select accepts only coll 2.4.0. */
typedef mca_coll_base_component_2_4_0_t ipmc_coll_component_t;
#define IPMC_COLL_BASE_VERSION MCA_COLL_BASE_VERSION_2_4_0
/* The context id is 128-bit; the local one is the same on every rank for the
   communicators the classic cid agreement creates (every one that is derived
   from MPI_COMM_WORLD). */
#define IPMC_COMM_CID(comm) ompi_comm_get_local_cid(comm)
#elif OMPI_MAJOR_VERSION == 4 && OMPI_MINOR_VERSION >= 1
typedef mca_coll_base_component_2_0_0_t ipmc_coll_component_t;
#define IPMC_COLL_BASE_VERSION MCA_COLL_BASE_VERSION_2_0_0
#define IPMC_COMM_CID(comm) ompi_comm_get_cid(comm)
#else
#error "ipmc supports Open MPI 4.1 and 5.0"
#endif

/* The modex (per-process data exchanged at MPI_Init): 4.1 wraps PMIx in
   OPAL's own names, 5.0 uses PMIx's. */
#if OMPI_MAJOR_VERSION == 5
#include "opal/mca/pmix/pmix-internal.h"
#define IPMC_MODEX_SCOPE PMIX_GLOBAL
#define IPMC_MODEX_UINT64 PMIX_UINT64
#define IPMC_MODEX_STRING PMIX_STRING
/* 5.0 exchanges process data between nodes on demand: another node's digest
   may have to be fetched. */
#define IPMC_MODEX_FETCHES 1
#else
#include "opal/mca/pmix/pmix.h"
#define IPMC_MODEX_SCOPE OPAL_PMIX_GLOBAL
#define IPMC_MODEX_UINT64 OPAL_UINT64
#define IPMC_MODEX_STRING OPAL_STRING
#define IPMC_MODEX_FETCHES 0
#endif

/* The visibility of the component structure: 5.0 has no OMPI_MODULE_DECLSPEC. */
#ifdef OMPI_MODULE_DECLSPEC
#define IPMC_MODULE_DECLSPEC OMPI_MODULE_DECLSPEC
#else
#define IPMC_MODULE_DECLSPEC OMPI_DECLSPEC
#endif

/* Whether `buf` lies in an accelerator's memory (a GPU's), which the host
   must not touch: 5.0 asks its accelerator framework (whose null component
   says no), 4.1 CUDA where it was built with it. Open MPI's point-to-point
   and its convertor handle such memory; ipmc leaves it to them. */
#if OMPI_MAJOR_VERSION == 5
#include "opal/mca/accelerator/accelerator.h"
static inline bool ipmc_on_device(const void *buf)
{
    int dev_id;
    uint64_t flags;
    return NULL != buf && opal_accelerator.check_addr(buf, &dev_id, &flags) > 0;
}
#elif OPAL_CUDA_SUPPORT
#include "opal/datatype/opal_convertor.h"
#include "opal/datatype/opal_datatype_cuda.h"
static inline bool ipmc_on_device(const void *buf)
{
    return NULL != buf && opal_cuda_check_bufs((char *) buf, NULL);
}
#else
static inline bool ipmc_on_device(const void *buf)
{
    (void) buf;
    return false;
}
#endif

#endif /* IPMC_COMPAT_H */
