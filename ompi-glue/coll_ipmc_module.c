/*
 * The ipmc module: one per communicator, an OPAL object that carries Rust's
 * state and the broadcast ipmc replaced.
 */
#include "ompi_config.h"

#include <pthread.h>
#include <stdlib.h>

#include "ompi/communicator/communicator.h"
#include "ompi/mca/coll/base/coll_base_functions.h"
#include "ompi/request/request.h"

#include "coll_ipmc.h"

/* The collectives whose function of the replaced component ipmc keeps (and
   whose module it retains) for its fallback. */
#define IPMC_KEPT(X) X(bcast) X(ibcast) X(barrier) X(allgather) X(allgatherv)

static void ipmc_module_construct(mca_coll_ipmc_module_t *m)
{
    m->rs = NULL;
    m->in_call = 0;
#define IPMC_CLEAR(coll)                                                                           \
    m->prev_##coll = NULL;                                                                         \
    m->prev_##coll##_module = NULL;
    IPMC_KEPT(IPMC_CLEAR)
#undef IPMC_CLEAR
}

static void ipmc_module_destruct(mca_coll_ipmc_module_t *m)
{
    if (NULL != m->rs) {
        ipmc_rs_module_destroy(m->rs);
        m->rs = NULL;
    }
#define IPMC_RELEASE(coll)                                                                         \
    if (NULL != m->prev_##coll##_module) {                                                         \
        OBJ_RELEASE(m->prev_##coll##_module);                                                      \
        m->prev_##coll##_module = NULL;                                                            \
    }
    IPMC_KEPT(IPMC_RELEASE)
#undef IPMC_RELEASE
}

OBJ_CLASS_INSTANCE(mca_coll_ipmc_module_t, mca_coll_base_module_t, ipmc_module_construct,
                   ipmc_module_destruct);

static int ipmc_module_enable(mca_coll_base_module_t *module, struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;

    /* Lower-priority components are already installed: theirs is the fallback. */
    if (NULL == comm->c_coll->coll_bcast || NULL == comm->c_coll->coll_bcast_module) {
        opal_output_verbose(1, mca_coll_ipmc_output,
                            "ipmc: no broadcast to fall back to on %s; ipmc steps aside",
                            comm->c_name);
        return OMPI_ERROR;
    }
    /* The base installs ipmc's functions after this returns: where the
       replaced component has no function of a collective, ipmc offers none
       either (it could not fall back); where ipmc offers one, it keeps the
       replaced one. */
#define IPMC_KEEP(coll)                                                                            \
    if (NULL == comm->c_coll->coll_##coll || NULL == comm->c_coll->coll_##coll##_module) {         \
        m->super.coll_##coll = NULL;                                                               \
    } else if (NULL != m->super.coll_##coll) {                                                     \
        m->prev_##coll = comm->c_coll->coll_##coll;                                                \
        m->prev_##coll##_module = comm->c_coll->coll_##coll##_module;                              \
        OBJ_RETAIN(m->prev_##coll##_module);                                                       \
    }
    IPMC_KEPT(IPMC_KEEP)
#undef IPMC_KEEP
    /* A persistent broadcast's starts are nonblocking broadcasts. */
    if (NULL == m->super.coll_ibcast) {
        m->super.coll_bcast_init = NULL;
    }
    return ipmc_rs_module_enable(m->rs, (struct ipmc_module *) m, comm);
}

static int ipmc_module_disable(mca_coll_base_module_t *module, struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    if (NULL != m->rs) {
        ipmc_rs_module_disable(m->rs, comm);
    }
    return OMPI_SUCCESS;
}

/* Runs `call` (one of ipmc's blocking collectives) on module `m`, or
   `prev` (the replaced component's) if Open MPI entered the communicator's
   collectives from inside one of ipmc's (see `in_call`). */
#define IPMC_SERVE(m, call, prev)                                                                 \
    do {                                                                                           \
        int rc_;                                                                                   \
        if ((m)->in_call) {                                                                        \
            return (prev);                                                                         \
        }                                                                                          \
        (m)->in_call = 1;                                                                          \
        rc_ = (call);                                                                              \
        (m)->in_call = 0;                                                                          \
        return rc_;                                                                                \
    } while (0)

static int ipmc_bcast(void *buf, int count, struct ompi_datatype_t *dt, int root,
                      struct ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    IPMC_SERVE(m, ipmc_rs_bcast(m->rs, buf, count, dt, root, comm, (struct ipmc_module *) m),
               m->prev_bcast(buf, count, dt, root, comm, m->prev_bcast_module));
}

static int ipmc_barrier(struct ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    IPMC_SERVE(m, ipmc_rs_barrier(m->rs, comm, (struct ipmc_module *) m),
               m->prev_barrier(comm, m->prev_barrier_module));
}

static int ipmc_allgather(const void *sbuf, int scount, struct ompi_datatype_t *sdtype, void *rbuf,
                          int rcount, struct ompi_datatype_t *rdtype,
                          struct ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    ipmc_allgather_args_t args = {MPI_IN_PLACE == sbuf ? NULL : sbuf, scount, sdtype, rbuf,
                                  rcount, NULL, NULL, rdtype};
    IPMC_SERVE(m, ipmc_rs_allgather(m->rs, &args, comm, (struct ipmc_module *) m),
               m->prev_allgather(sbuf, scount, sdtype, rbuf, rcount, rdtype, comm,
                                 m->prev_allgather_module));
}

static int ipmc_allgatherv(const void *sbuf, int scount, struct ompi_datatype_t *sdtype,
                           void *rbuf, const int *rcounts, const int *displs,
                           struct ompi_datatype_t *rdtype, struct ompi_communicator_t *comm,
                           mca_coll_base_module_t *module)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    ipmc_allgather_args_t args = {MPI_IN_PLACE == sbuf ? NULL : sbuf, scount, sdtype, rbuf,
                                  0, rcounts, displs, rdtype};
    IPMC_SERVE(m, ipmc_rs_allgather(m->rs, &args, comm, (struct ipmc_module *) m),
               m->prev_allgatherv(sbuf, scount, sdtype, rbuf, rcounts, displs, rdtype, comm,
                                  m->prev_allgatherv_module));
}

/* A nonblocking broadcast handed to the replaced component whose request
   had not completed when it began: the user holds ipmc's request `outer`,
   which completes when the replaced component's `inner` does, and ipmc holds
   the communicator until then. Open MPI's libnbc does not keep the
   communicator alive, and a program may free it before the request completes
   (MPI allows it: pending operations complete normally); on 6 ranks or more
   libnbc's next send then ended the process. */
typedef struct ipmc_handed_t {
    ompi_request_t *outer;
    ompi_request_t *inner;
    struct ompi_communicator_t *comm;
    /* `inner`'s own completion callback and its data, run first. */
    ompi_request_complete_fn_t cb;
    void *cb_data;
    struct ipmc_handed_t *next;
} ipmc_handed_t;

/* Those whose `inner` completed, for ipmc's progress to free `inner` and let
   the communicator go: not inside the replaced component's progress, which
   completes `inner`, and under which the last reference's destructor would
   tear that component's module down. Any thread's progress may add one. */
static ipmc_handed_t *ipmc_handed;
static pthread_mutex_t ipmc_handed_lock = PTHREAD_MUTEX_INITIALIZER;

static void ipmc_handed_push(ipmc_handed_t *h)
{
    pthread_mutex_lock(&ipmc_handed_lock);
    h->next = ipmc_handed;
    __atomic_store_n(&ipmc_handed, h, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ipmc_handed_lock);
}

/* `inner`'s completion callback: `outer` completes with it. */
static int ipmc_handed_complete(ompi_request_t *inner)
{
    ipmc_handed_t *h = (ipmc_handed_t *) inner->req_complete_cb_data;
    int rc = OMPI_SUCCESS;
    inner->req_complete_cb_data = h->cb_data;
    if (NULL != h->cb) {
        rc = h->cb(inner);
    }
    if (OMPI_SUCCESS != rc) {
        /* Not complete after all: wait on, after what its callback set. */
        h->cb = inner->req_complete_cb;
        h->cb_data = inner->req_complete_cb_data;
        inner->req_complete_cb = ipmc_handed_complete;
        inner->req_complete_cb_data = h;
        return rc;
    }
    ipmc_request_complete(h->outer, inner->req_status.MPI_ERROR);
    ipmc_handed_push(h);
    return rc;
}

/* Returns `outer`, to complete with `inner` while ipmc keeps `comm`, or
   `inner` itself where memory is short (then as Open MPI alone). */
static ompi_request_t *ipmc_hand(ompi_request_t *outer, ompi_request_t *inner,
                                 struct ompi_communicator_t *comm)
{
    ipmc_handed_t *h = malloc(sizeof *h);
    if (NULL == h) {
        ipmc_request_drop(outer);
        return inner;
    }
    OBJ_RETAIN(comm);
    h->outer = outer;
    h->inner = inner;
    h->comm = comm;
    h->cb = inner->req_complete_cb;
    h->cb_data = inner->req_complete_cb_data;
    h->next = NULL;
    ipmc_progress_register();
    /* Runs the callback at once if `inner` completed meanwhile. */
    (void) ompi_request_set_callback(inner, ipmc_handed_complete, h);
    return outer;
}

int mca_coll_ipmc_handed_progress(void)
{
    ipmc_handed_t *done;
    int freed = 0;
    if (NULL == __atomic_load_n(&ipmc_handed, __ATOMIC_ACQUIRE)
        || 0 != pthread_mutex_trylock(&ipmc_handed_lock)) {
        return 0;
    }
    done = ipmc_handed;
    __atomic_store_n(&ipmc_handed, NULL, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&ipmc_handed_lock);
    while (NULL != done) {
        ipmc_handed_t *h = done;
        done = h->next;
        /* Another thread's completion of `inner` may not have marked it
           yet: next time. */
        if (!REQUEST_COMPLETE(h->inner)) {
            ipmc_handed_push(h);
            continue;
        }
        (void) ompi_request_free(&h->inner);
        OBJ_RELEASE(h->comm);
        free(h);
        freed++;
    }
    return freed;
}

/* ipmc serves the call and completes the request it made (Rust holds one
   reference, the user the other), or hands the call to the replaced
   component, whose request the one ipmc made follows if it is still pending. */
int mca_coll_ipmc_ibcast(void *buf, int count, struct ompi_datatype_t *dt, int root,
                         struct ompi_communicator_t *comm, ompi_request_t **request,
                         mca_coll_base_module_t *module)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    ompi_request_t *req = ipmc_request_new(comm), *inner = NULL;
    int rc;
    if (NULL == req) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    rc = ipmc_rs_ibcast(m->rs, buf, count, dt, root, comm, req);
    if (OMPI_SUCCESS == rc) {
        *request = req;
        return OMPI_SUCCESS;
    }
    if (IPMC_PREVIOUS == rc) {
        rc = m->prev_ibcast(buf, count, dt, root, comm, &inner, m->prev_ibcast_module);
        if (OMPI_SUCCESS == rc && !REQUEST_COMPLETE(inner)) {
            *request = ipmc_hand(req, inner, comm);
            return OMPI_SUCCESS;
        }
        if (OMPI_SUCCESS == rc) {
            *request = inner;
        }
    }
    ipmc_request_drop(req);
    return rc;
}

mca_coll_base_module_t *mca_coll_ipmc_comm_query(struct ompi_communicator_t *comm, int *priority)
{
    mca_coll_ipmc_module_t *m;
    struct ipmc_rs_module *rs = ipmc_rs_comm_query(comm, &mca_coll_ipmc_params, priority);
    if (NULL == rs) {
        return NULL;
    }
    m = OBJ_NEW(mca_coll_ipmc_module_t);
    if (NULL == m) {
        ipmc_rs_module_destroy(rs);
        return NULL;
    }
    m->rs = rs;
    /* coll/base's algorithms cache their trees here; the base destructor
       releases it. */
    m->super.base_data = OBJ_NEW(mca_coll_base_comm_t);
    if (NULL == m->super.base_data) {
        OBJ_RELEASE(m);
        return NULL;
    }
    m->super.coll_module_enable = ipmc_module_enable;
    m->super.coll_module_disable = ipmc_module_disable;
    m->super.coll_bcast = ipmc_bcast;
    m->super.coll_ibcast = mca_coll_ipmc_ibcast;
    m->super.coll_bcast_init = mca_coll_ipmc_bcast_init;
    /* barrier_algorithm 1 leaves MPI_Barrier to the component ipmc replaces. */
    if (1 != mca_coll_ipmc_params.barrier_algorithm) {
        m->super.coll_barrier = ipmc_barrier;
    }
    /* allgather_algorithm 1 leaves MPI_Allgather and MPI_Allgatherv likewise. */
    if (1 != mca_coll_ipmc_params.allgather_algorithm) {
        m->super.coll_allgather = ipmc_allgather;
        m->super.coll_allgatherv = ipmc_allgatherv;
    }
    return &m->super;
}

struct ipmc_rs_module *mca_coll_ipmc_comm_state(struct ompi_communicator_t *comm)
{
    if (NULL == comm->c_coll || ipmc_bcast != comm->c_coll->coll_bcast) {
        return NULL;
    }
    return ((mca_coll_ipmc_module_t *) comm->c_coll->coll_bcast_module)->rs;
}
