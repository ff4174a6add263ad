/*
 * Persistent broadcasts: MPI_Bcast_init (MPIX_Bcast_init in Open MPI 4.1).
 *
 * Each MPI_Start begins one nonblocking broadcast with the arguments given at
 * initialisation, through ipmc's MPI_Ibcast: ipmc's own where ipmc serves
 * that call, the replaced component's where it does not. So a persistent
 * broadcast multicasts wherever MPI_Ibcast does, and its starts take their
 * place among the communicator's other collectives in the order the ranks
 * make them, as the standard orders them. ipmc's progress function completes
 * the persistent request once the broadcast it started has completed.
 */
#include "ompi_config.h"

#include <pthread.h>

#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/coll/base/coll_base_util.h"
#include "ompi/request/request.h"

#include "coll_ipmc.h"

typedef struct ipmc_persistent_t {
    /* The base of Open MPI's collective requests, as MPI_Bcast_init expects
       (it hands the request to ompi_coll_base_retain_datatypes). */
    ompi_coll_base_nbc_request_t super;
    void *buf;
    int count;
    struct ompi_datatype_t *dt;
    int root;
    struct ompi_communicator_t *comm;
    mca_coll_base_module_t *module;
    /* The nonblocking broadcast the last MPI_Start began, until it completed. */
    ompi_request_t *inner;
    /* The next of those started and not yet complete. */
    struct ipmc_persistent_t *next;
} ipmc_persistent_t;

static void ipmc_persistent_destruct(ipmc_persistent_t *p)
{
    OBJ_RELEASE(p->dt);
    OBJ_RELEASE(p->module);
    OBJ_RELEASE(p->comm);
    OMPI_REQUEST_FINI(&p->super.super);
}

OBJ_CLASS_INSTANCE(ipmc_persistent_t, ompi_coll_base_nbc_request_t, NULL, ipmc_persistent_destruct);

/* The started ones whose broadcast has not completed; any thread may start
   one, and any thread's progress may complete it. */
static ipmc_persistent_t *ipmc_started;
static pthread_mutex_t ipmc_started_lock = PTHREAD_MUTEX_INITIALIZER;

/* The broadcast of `p` completed: so does `p`. */
static void ipmc_persistent_complete(ipmc_persistent_t *p)
{
    ompi_request_t *req = &p->super.super;
    req->req_status.MPI_ERROR = p->inner->req_status.MPI_ERROR;
    (void) ompi_request_free(&p->inner);
    ompi_request_complete(req, true);
}

int mca_coll_ipmc_persistent_progress(void)
{
    ipmc_persistent_t *done = NULL, **at;
    int completed = 0;
    if (NULL == __atomic_load_n(&ipmc_started, __ATOMIC_ACQUIRE)
        || 0 != pthread_mutex_trylock(&ipmc_started_lock)) {
        return 0;
    }
    for (at = &ipmc_started; NULL != *at;) {
        ipmc_persistent_t *p = *at;
        if (REQUEST_COMPLETE(p->inner)) {
            /* Atomic: `at` may be the head, which the check on entry reads unlocked. */
            __atomic_store_n(at, p->next, __ATOMIC_RELEASE);
            p->next = done;
            done = p;
        } else {
            at = &p->next;
        }
    }
    pthread_mutex_unlock(&ipmc_started_lock);
    while (NULL != done) {
        ipmc_persistent_t *p = done;
        done = p->next;
        p->next = NULL;
        ipmc_persistent_complete(p);
        completed++;
    }
    return completed;
}

static int ipmc_persistent_start(size_t count, ompi_request_t **requests)
{
    for (size_t i = 0; i < count; i++) {
        ipmc_persistent_t *p = (ipmc_persistent_t *) requests[i];
        ompi_request_t *req = &p->super.super;
        int rc;
        req->req_state = OMPI_REQUEST_ACTIVE;
        req->req_complete = REQUEST_PENDING;
        req->req_status.MPI_ERROR = MPI_SUCCESS;
        rc = mca_coll_ipmc_ibcast(p->buf, p->count, p->dt, p->root, p->comm, &p->inner,
                                  p->module);
        if (OMPI_SUCCESS != rc) {
            /* Nothing began: a wait returns the error. */
            req->req_status.MPI_ERROR = rc;
            ompi_request_complete(req, true);
            return rc;
        }
        if (REQUEST_COMPLETE(p->inner)) {
            ipmc_persistent_complete(p);
            continue;
        }
        pthread_mutex_lock(&ipmc_started_lock);
        p->next = ipmc_started;
        __atomic_store_n(&ipmc_started, p, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&ipmc_started_lock);
        ipmc_progress_register();
    }
    return OMPI_SUCCESS;
}

/* As Open MPI's own persistent collectives: an active one can be neither
   freed nor cancelled. */
static int ipmc_persistent_free(ompi_request_t **request)
{
    if (!REQUEST_COMPLETE(*request)) {
        return MPI_ERR_REQUEST;
    }
    OBJ_RELEASE(*request);
    *request = MPI_REQUEST_NULL;
    return OMPI_SUCCESS;
}

static int ipmc_persistent_cancel(ompi_request_t *request, int complete)
{
    return MPI_ERR_REQUEST;
}

int mca_coll_ipmc_bcast_init(void *buf, int count, struct ompi_datatype_t *dt, int root,
                             struct ompi_communicator_t *comm, struct ompi_info_t *info,
                             ompi_request_t **request, mca_coll_base_module_t *module)
{
    ipmc_persistent_t *p = OBJ_NEW(ipmc_persistent_t);
    ompi_request_t *req;
    if (NULL == p) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    req = &p->super.super;
    mca_coll_ipmc_request_init(req, comm, true);
    req->req_start = ipmc_persistent_start;
    req->req_free = ipmc_persistent_free;
    req->req_cancel = ipmc_persistent_cancel;
    p->buf = buf;
    p->count = count;
    p->dt = dt;
    p->root = root;
    p->comm = comm;
    p->module = module;
    p->inner = NULL;
    p->next = NULL;
    /* The request may outlive the user's handles of all three. (MPI_Bcast_init's
       ompi_coll_base_retain_datatypes leaves a request that is complete alone,
       as an unstarted persistent one is, so it never wraps req_free, whose
       OBJ_RELEASE then frees the request last.) */
    OBJ_RETAIN(dt);
    OBJ_RETAIN(comm);
    OBJ_RETAIN(module);
    *request = req;
    return OMPI_SUCCESS;
}
