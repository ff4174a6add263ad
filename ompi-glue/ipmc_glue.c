/*
 * One-line wrappers for the Open MPI macros, inlines and struct fields that
 * Rust cannot reach. See ipmc_glue.h for the contract of each.
 */
#include "ompi_config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ompi/attribute/attribute.h"
#include "ompi/communicator/communicator.h"
#include "ompi/datatype/ompi_datatype.h"
#include "ompi/mca/coll/base/coll_base_functions.h"
#include "ompi/mca/coll/base/coll_base_util.h"
#include "ompi/mca/coll/base/coll_tags.h"
#include "ompi/mca/pml/pml.h"
#include "ompi/request/request.h"
#include "opal/datatype/opal_convertor.h"
#include "opal/runtime/opal_progress.h"
#include "opal/util/info.h"
#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"
#include "ompi/proc/proc.h"
#if OMPI_MAJOR_VERSION == 5
#include "ompi/instance/instance.h"
#endif

#include "coll_ipmc.h"

int ipmc_comm_rank(struct ompi_communicator_t *comm) { return ompi_comm_rank(comm); }
int ipmc_comm_size(struct ompi_communicator_t *comm) { return ompi_comm_size(comm); }
int ipmc_comm_is_inter(struct ompi_communicator_t *comm) { return OMPI_COMM_IS_INTER(comm) ? 1 : 0; }
uint32_t ipmc_comm_cid(struct ompi_communicator_t *comm) { return IPMC_COMM_CID(comm); }
const char *ipmc_comm_name(struct ompi_communicator_t *comm) { return comm->c_name; }
int ipmc_world_rank(void) { return (int) opal_proc_local_get()->proc_name.vpid; }

int ipmc_bcast_tag(void) { return MCA_COLL_BASE_TAG_BCAST; }

/* The one tag of the collective range that no component of Open MPI 4.1 or
   5.0 sends with: libnbc and adapt reserve tags above it
   (ompi_coll_base_nbc_reserve_tags never hands it out), the neighbourhood
   collectives use those below it. */
int ipmc_queue_tag(void) { return MCA_COLL_BASE_TAG_NONBLOCKING_END; }

int ipmc_isend_bytes(const void *buf, size_t len, int dst, int tag,
                     struct ompi_communicator_t *comm, struct ompi_request_t **req)
{
    return MCA_PML_CALL(isend(buf, len, MPI_BYTE, dst, tag, MCA_PML_BASE_SEND_STANDARD, comm, req));
}

int ipmc_issend_bytes(const void *buf, size_t len, int dst, int tag,
                      struct ompi_communicator_t *comm, struct ompi_request_t **req)
{
    return MCA_PML_CALL(isend(buf, len, MPI_BYTE, dst, tag, MCA_PML_BASE_SEND_SYNCHRONOUS, comm,
                              req));
}

int ipmc_irecv_bytes(void *buf, size_t len, int src, int tag, struct ompi_communicator_t *comm,
                     struct ompi_request_t **req)
{
    return MCA_PML_CALL(irecv(buf, len, MPI_BYTE, src, tag, comm, req));
}

int ipmc_answer_root(int root, struct ompi_communicator_t *comm)
{
    char none = 0;
    return MCA_PML_CALL(send(&none, 0, MPI_BYTE, root, MCA_COLL_BASE_TAG_BARRIER,
                             MCA_PML_BASE_SEND_STANDARD, comm));
}

int ipmc_irecv_answer(int src, struct ompi_communicator_t *comm, struct ompi_request_t **req)
{
    /* Empty: no byte is ever written to the buffer. */
    static char none;
    return MCA_PML_CALL(irecv(&none, 0, MPI_BYTE, src, MCA_COLL_BASE_TAG_BARRIER, comm, req));
}

int ipmc_isend_empty(int dst, struct ompi_communicator_t *comm, struct ompi_request_t **req)
{
    static char none;
    return MCA_PML_CALL(isend(&none, 0, MPI_BYTE, dst, MCA_COLL_BASE_TAG_BARRIER,
                              MCA_PML_BASE_SEND_STANDARD, comm, req));
}

int ipmc_wait_all_counts(size_t n, struct ompi_request_t **reqs, size_t *counts)
{
    ompi_status_public_t *st = malloc(n * sizeof(*st));
    int rc;
    if (NULL == st) {
        return OMPI_ERR_OUT_OF_RESOURCE;
    }
    rc = ompi_request_wait_all(n, reqs, st);
    if (OMPI_SUCCESS == rc) {
        for (size_t i = 0; i < n; ++i) {
            counts[i] = st[i]._ucount;
        }
    } else {
        /* A collective has no statuses to look in: like Open MPI's own, it
         * returns the failed request's error (with fault tolerance,
         * MPIX_ERR_PROC_FAILED or MPIX_ERR_REVOKED), not MPI_ERR_IN_STATUS. */
        for (size_t i = 0; MPI_ERR_IN_STATUS == rc && i < n; ++i) {
            if (MPI_SUCCESS != st[i].MPI_ERROR && MPI_ERR_PENDING != st[i].MPI_ERROR) {
                rc = st[i].MPI_ERROR;
            }
        }
        ompi_coll_base_free_reqs(reqs, (int) n);
    }
    free(st);
    return rc;
}

/* The return code carries a request's error; MPI leaves status.MPI_ERROR unset. */
int ipmc_test(struct ompi_request_t **req, int *done, size_t *count)
{
    ompi_status_public_t status;
    int rc = ompi_request_test(req, done, &status);
    if (OMPI_SUCCESS == rc && *done) {
        *count = status._ucount;
    }
    return rc;
}

int ipmc_wait(struct ompi_request_t **req, size_t *count)
{
    ompi_status_public_t status;
    int rc = ompi_request_wait(req, &status);
    if (OMPI_SUCCESS == rc) {
        *count = status._ucount;
    }
    return rc;
}

int ipmc_look(struct ompi_request_t **req, int *done, size_t *count)
{
    int rc;
    if (!REQUEST_COMPLETE(*req)) {
        *done = 0;
        return OMPI_SUCCESS;
    }
    rc = (*req)->req_status.MPI_ERROR;
    *count = (*req)->req_status._ucount;
    *done = 1;
    (void) ompi_request_free(req);
    return rc;
}

void ipmc_progress_once(void) { (void) opal_progress(); }

static bool ipmc_progress_registered = false;

static int ipmc_progress(void)
{
    return ipmc_rs_progress() + mca_coll_ipmc_persistent_progress() + mca_coll_ipmc_handed_progress();
}

void ipmc_progress_register(void)
{
    if (!ipmc_progress_registered && OPAL_SUCCESS == opal_progress_register(ipmc_progress)) {
        ipmc_progress_registered = true;
    }
}

void ipmc_progress_unregister(void)
{
    if (ipmc_progress_registered) {
        (void) opal_progress_unregister(ipmc_progress);
        ipmc_progress_registered = false;
    }
}

static int ipmc_self_keyval = MPI_KEYVAL_INVALID;

static int ipmc_at_finalize(MPI_Comm comm, int keyval, void *value, void *extra)
{
    (void) comm;
    (void) keyval;
    (void) value;
    (void) extra;
    ipmc_rs_finish_all();
    (void) mca_coll_ipmc_handed_progress();
    return MPI_SUCCESS;
}

/* Open MPI's own attribute calls, not MPI_Comm_create_keyval and
 * MPI_Comm_set_attr: this may run inside MPI_Init (MPI_COMM_WORLD's group is
 * agreed from its creation on), where the MPI calls abort the process. */
void ipmc_finish_at_finalize(void)
{
    ompi_attribute_fn_ptr_union_t copy_fn, del_fn;
    /* 4.1's internal copy function takes one argument more than MPI's (the
       new communicator), which MPI_COMM_NULL_COPY_FN ignores, as Open MPI's
       own keyvals do; the cast through void (*)(void) says so to the compiler. */
    copy_fn.attr_communicator_copy_fn =
        (__typeof__(copy_fn.attr_communicator_copy_fn)) (void (*)(void)) MPI_COMM_NULL_COPY_FN;
    del_fn.attr_communicator_delete_fn = ipmc_at_finalize;
    if (MPI_KEYVAL_INVALID == ipmc_self_keyval
        && OMPI_SUCCESS
               == ompi_attr_create_keyval(COMM_ATTR, copy_fn, del_fn, &ipmc_self_keyval, NULL, 0,
                                          NULL)) {
        (void) ompi_attr_set_c(COMM_ATTR, MPI_COMM_SELF, &MPI_COMM_SELF->c_keyhash,
                               ipmc_self_keyval, NULL, false);
    }
}

int ipmc_cancel(struct ompi_request_t *req) { return ompi_request_cancel(req); }

void ipmc_comm_retain(struct ompi_communicator_t *comm) { OBJ_RETAIN(comm); }
void ipmc_comm_release(struct ompi_communicator_t *comm) { OBJ_RELEASE(comm); }

int ipmc_comm_has_local_peer(struct ompi_communicator_t *comm)
{
    int me = ompi_comm_rank(comm);
    for (int i = 0; i < ompi_comm_size(comm); ++i) {
        ompi_proc_t *proc = ompi_comm_peer_lookup(comm, i);
        if (i != me && NULL != proc && OPAL_PROC_ON_LOCAL_NODE(proc->super.proc_flags)) {
            return 1;
        }
    }
    return 0;
}

int ipmc_comm_of_world_model(struct ompi_communicator_t *comm)
{
#if OMPI_MAJOR_VERSION == 5
    return NULL != ompi_mpi_instance_default && comm->instance == ompi_mpi_instance_default;
#else
    (void) comm;
    return 1;
#endif
}

int ipmc_comm_info(struct ompi_communicator_t *comm, const char *key, char *value, int len)
{
    opal_info_t *info = comm->super.s_info;
    int flag = 0;
    if (NULL == info || len < 2) {
        return -1;
    }
#if OMPI_MAJOR_VERSION == 5
    opal_cstring_t *found = NULL;
    if (OPAL_SUCCESS != opal_info_get(info, key, &found, &flag) || !flag || NULL == found) {
        return -1;
    }
    int whole = (int) found->length;
    snprintf(value, (size_t) len, "%s", found->string);
    OBJ_RELEASE(found);
    return whole;
#else
    int whole = 0;
    if (OPAL_SUCCESS != opal_info_get_valuelen(info, key, &whole, &flag) || !flag) {
        return -1;
    }
    /* 4.1 writes a terminator after at most len - 1 characters. */
    opal_info_get(info, key, len - 1, value, &flag);
    value[len - 1] = '\0';
    return flag ? whole : -1;
#endif
}

int ipmc_comm_split(struct ompi_communicator_t *comm, int color, int key, int without_ipmc,
                    const char *name, struct ompi_communicator_t **out)
{
    *out = NULL;
    struct ompi_communicator_t *part = NULL;
    /* Open MPI's own way to keep a component off a communicator (han's for
       its parts too): the info key is read where the part's components are
       selected, which may be another thread's progress under
       MPI_THREAD_MULTIPLE, not this call. */
    opal_info_t info;
    OBJ_CONSTRUCT(&info, opal_info_t);
    int rc = without_ipmc ? opal_info_set(&info, "ompi_comm_coll_preference", "^ipmc")
                          : OPAL_SUCCESS;
    if (OPAL_SUCCESS == rc) {
        rc = ompi_comm_split_with_info(comm, color < 0 ? MPI_UNDEFINED : color, key, &info, &part,
                                       false);
    }
    OBJ_DESTRUCT(&info);
    if (OMPI_SUCCESS != rc || NULL == part || MPI_COMM_NULL == part) {
        return rc;
    }
    /* The name shows in statistics. Open MPI's own function: MPI_Comm_set_name
       is erroneous before MPI_Init ends, and a spawned job's first broadcasts
       run inside it (MPI_Comm_spawn's connection). */
    (void) ompi_comm_set_name(part, name);
    *out = part;
    return OMPI_SUCCESS;
}

void ipmc_comm_free(struct ompi_communicator_t **comm)
{
    if (NULL != *comm) {
        (void) ompi_comm_free(comm);
    }
    *comm = NULL;
}

void ipmc_comm_rename(struct ompi_communicator_t *comm, const char *name)
{
    (void) ompi_comm_set_name(comm, name);
}

int ipmc_comm_barrier(struct ompi_communicator_t *comm)
{
    return comm->c_coll->coll_barrier(comm, comm->c_coll->coll_barrier_module);
}

int ipmc_comm_gatherv_bytes(struct ompi_communicator_t *comm, const void *sbuf, int len,
                            void *rbuf, const int *counts, const int *displs, int root)
{
    return comm->c_coll->coll_gatherv(sbuf, len, MPI_BYTE, rbuf, counts, displs, MPI_BYTE, root,
                                      comm, comm->c_coll->coll_gatherv_module);
}

int ipmc_comm_allgatherv_bytes(struct ompi_communicator_t *comm, void *buf, const int *counts,
                               const int *displs)
{
    return comm->c_coll->coll_allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs,
                                         MPI_BYTE, comm, comm->c_coll->coll_allgatherv_module);
}

int ipmc_comm_bcast_bytes(struct ompi_communicator_t *comm, void *buf, int len, int root)
{
    return comm->c_coll->coll_bcast(buf, len, MPI_BYTE, root, comm, comm->c_coll->coll_bcast_module);
}

int ipmc_comm_allreduce_max_ints(struct ompi_communicator_t *comm, int *v, int n)
{
    /* coll/base's recursive doubling, which keeps no state in a module, not
       the communicator's own allreduce: that may be han's (Open MPI 5.0's
       default), whose first call on a communicator splits it into han's own
       levels, 20 ms on 4 emulated hosts of 4 ranks, for the few hundred ints
       ipmc reduces once per communicator. */
    return ompi_coll_base_allreduce_intra_recursivedoubling(MPI_IN_PLACE, v, n, MPI_INT, MPI_MAX,
                                                            comm, NULL);
}

int ipmc_comm_ibcast_bytes(struct ompi_communicator_t *comm, void *buf, int len, int root,
                           struct ompi_request_t **req)
{
    return comm->c_coll->coll_ibcast(buf, len, MPI_BYTE, root, comm, req,
                                     comm->c_coll->coll_ibcast_module);
}

struct ompi_datatype_t *ipmc_dt_byte(void)
{
    return MPI_BYTE;
}

size_t ipmc_dt_size(struct ompi_datatype_t *dt)
{
    size_t size = 0;
    (void) ompi_datatype_type_size(dt, &size);
    return size;
}

int ipmc_dt_in_place(const void *buf, struct ompi_datatype_t *dt, int count)
{
    /* A GPU's memory is copied by Open MPI's convertor (ipmc_pack,
       ipmc_unpack), which calls the GPU's own copy. */
    return ompi_datatype_is_contiguous_memory_layout(dt, count) && !ipmc_on_device(buf) ? 1 : 0;
}

ptrdiff_t ipmc_dt_true_lb(struct ompi_datatype_t *dt)
{
    ptrdiff_t lb = 0, extent = 0;
    (void) ompi_datatype_get_true_extent(dt, &lb, &extent);
    return lb;
}

int ipmc_pack(const void *buf, int count, struct ompi_datatype_t *dt, void *out, size_t len)
{
    opal_convertor_t cv;
    struct iovec iov = {.iov_base = out, .iov_len = len};
    uint32_t niov = 1;
    size_t done = len;
    int rc;

    OBJ_CONSTRUCT(&cv, opal_convertor_t);
    rc = opal_convertor_copy_and_prepare_for_send(ompi_mpi_local_convertor, &dt->super, count, buf,
                                                  0, &cv);
    if (OMPI_SUCCESS == rc) {
        rc = (1 == opal_convertor_pack(&cv, &iov, &niov, &done) && done == len) ? OMPI_SUCCESS
                                                                                : OMPI_ERROR;
    }
    OBJ_DESTRUCT(&cv);
    return rc;
}

int ipmc_unpack(const void *in, size_t len, void *buf, int count, struct ompi_datatype_t *dt)
{
    opal_convertor_t cv;
    struct iovec iov = {.iov_base = (void *) in, .iov_len = len};
    uint32_t niov = 1;
    size_t done = len;
    int rc;

    OBJ_CONSTRUCT(&cv, opal_convertor_t);
    rc = opal_convertor_copy_and_prepare_for_recv(ompi_mpi_local_convertor, &dt->super, count, buf,
                                                  0, &cv);
    if (OMPI_SUCCESS == rc) {
        rc = (1 == opal_convertor_unpack(&cv, &iov, &niov, &done) && done == len) ? OMPI_SUCCESS
                                                                                  : OMPI_ERROR;
    }
    OBJ_DESTRUCT(&cv);
    return rc;
}

int ipmc_prev_bcast(struct ipmc_module *module, void *buf, int count,
                    struct ompi_datatype_t *dt, int root, struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    return m->prev_bcast(buf, count, dt, root, comm, m->prev_bcast_module);
}

int ipmc_prev_allgather(struct ipmc_module *module, const ipmc_allgather_args_t *args,
                        struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    const void *sbuf = NULL == args->sbuf ? MPI_IN_PLACE : args->sbuf;
    if (NULL != args->rcounts) {
        return m->prev_allgatherv(sbuf, args->scount, args->sdtype, args->rbuf, args->rcounts,
                                  args->displs, args->rdtype, comm, m->prev_allgatherv_module);
    }
    return m->prev_allgather(sbuf, args->scount, args->sdtype, args->rbuf, args->rcount,
                             args->rdtype, comm, m->prev_allgather_module);
}

int ipmc_base_allgather_ring(struct ipmc_module *module, const ipmc_allgather_args_t *args,
                             struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    const void *sbuf = NULL == args->sbuf ? MPI_IN_PLACE : args->sbuf;
    if (NULL != args->rcounts) {
        return ompi_coll_base_allgatherv_intra_ring(sbuf, args->scount, args->sdtype, args->rbuf,
                                                    args->rcounts, args->displs, args->rdtype,
                                                    comm, &m->super);
    }
    return ompi_coll_base_allgather_intra_ring(sbuf, args->scount, args->sdtype, args->rbuf,
                                               args->rcount, args->rdtype, comm, &m->super);
}

void *ipmc_allgather_block(const ipmc_allgather_args_t *args, int i)
{
    ptrdiff_t lb = 0, extent = 0;
    (void) ompi_datatype_get_extent(args->rdtype, &lb, &extent);
    ptrdiff_t at = NULL != args->displs ? args->displs[i] : (ptrdiff_t) i * args->rcount;
    return (char *) args->rbuf + at * extent;
}

int ipmc_prev_barrier(struct ipmc_module *module, struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    return m->prev_barrier(comm, m->prev_barrier_module);
}

int ipmc_base_barrier_linear(struct ipmc_module *module, struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    return ompi_coll_base_barrier_intra_basic_linear(comm, &m->super);
}

int ipmc_base_bcast_binomial(struct ipmc_module *module, void *buf, int count,
                             struct ompi_datatype_t *dt, int root,
                             struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    /* Unsegmented, as coll tuned runs it when it is forced (segsize 0); the
       tree is cached in the module's base_data (mca_coll_ipmc_comm_query). */
    return ompi_coll_base_bcast_intra_binomial(buf, count, dt, root, comm, &m->super, 0);
}

int ipmc_base_bcast_bintree(struct ipmc_module *module, void *buf, int count,
                            struct ompi_datatype_t *dt, int root,
                            struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    /* As the binomial tree above; base_data caches the binary tree alike. */
    return ompi_coll_base_bcast_intra_bintree(buf, count, dt, root, comm, &m->super, 0);
}

int ipmc_base_bcast_split_bintree(struct ipmc_module *module, void *buf, int count,
                                  struct ompi_datatype_t *dt, int root,
                                  struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    /* As the binary tree above, whose cached tree it uses. */
    return ompi_coll_base_bcast_intra_split_bintree(buf, count, dt, root, comm, &m->super, 0);
}

int ipmc_base_bcast_scatter_allgather(struct ipmc_module *module, void *buf, int count,
                                      struct ompi_datatype_t *dt, int root,
                                      struct ompi_communicator_t *comm)
{
    mca_coll_ipmc_module_t *m = (mca_coll_ipmc_module_t *) module;
    /* Unsegmented, as coll tuned runs it when it is forced; it caches
       nothing (fewer elements than ranks go to coll/base's linear one). */
    return ompi_coll_base_bcast_intra_scatter_allgather_ring(buf, count, dt, root, comm,
                                                             &m->super, 0);
}

/* A nonblocking broadcast's request; `freed`: the user let it go before it
   completed. It is a request of Open MPI's nonblocking collectives: MPI_Ibcast
   keeps a derived datatype alive in its fields until the request completes. */
typedef struct ipmc_request_t {
    ompi_coll_base_nbc_request_t super;
    bool freed;
} ipmc_request_t;

static int ipmc_request_free(ompi_request_t **request)
{
    ipmc_request_t *r = (ipmc_request_t *) *request;
    r->freed = true;
    OBJ_RELEASE(r);
    *request = MPI_REQUEST_NULL;
    return OMPI_SUCCESS;
}

static void ipmc_request_destruct(ipmc_request_t *r) { OMPI_REQUEST_FINI(&r->super.super); }

OBJ_CLASS_INSTANCE(ipmc_request_t, ompi_coll_base_nbc_request_t, NULL, ipmc_request_destruct);

void mca_coll_ipmc_request_init(ompi_request_t *req, struct ompi_communicator_t *comm,
                                 bool persistent)
{
    OMPI_REQUEST_INIT(req, persistent);
    req->req_type = OMPI_REQUEST_COLL;
    req->req_mpi_object.comm = comm;
    req->req_status.MPI_SOURCE = MPI_ANY_SOURCE;
    req->req_status.MPI_TAG = MPI_ANY_TAG;
    req->req_status.MPI_ERROR = MPI_SUCCESS;
    req->req_status._cancelled = 0;
    req->req_status._ucount = 0;
}

struct ompi_request_t *ipmc_request_new(struct ompi_communicator_t *comm)
{
    ipmc_request_t *r = OBJ_NEW(ipmc_request_t);
    ompi_request_t *req;
    if (NULL == r) {
        return NULL;
    }
    req = &r->super.super;
    mca_coll_ipmc_request_init(req, comm, false);
    req->req_state = OMPI_REQUEST_ACTIVE;
    req->req_free = ipmc_request_free;
    r->freed = false;
    OBJ_RETAIN(r);
    return req;
}

void ipmc_request_drop(struct ompi_request_t *req)
{
    OBJ_RELEASE(req);
    OBJ_RELEASE(req);
}

void ipmc_request_complete(struct ompi_request_t *req, int error)
{
    ipmc_request_t *r = (ipmc_request_t *) req;
    if (!r->freed) {
        req->req_status.MPI_ERROR = error;
        ompi_request_complete(req, true);
    }
    OBJ_RELEASE(r);
}

void ipmc_dt_retain(struct ompi_datatype_t *dt) { OBJ_RETAIN(dt); }
void ipmc_dt_release(struct ompi_datatype_t *dt) { OBJ_RELEASE(dt); }

void ipmc_log(int level, const char *line)
{
    opal_output_verbose(level, mca_coll_ipmc_output, "%s", line);
}

void ipmc_print(const char *line) { opal_output(0, "%s", line); }

/* The modex keys of ipmc's configuration digest and of the process's node. */
#define IPMC_MODEX_KEY "coll.ipmc.config"
#define IPMC_MODEX_NODE_KEY "coll.ipmc.node"

/* This process's node as its peers compare it: the host name and the
   kernel's boot id, so that machines that share a name (cloned from one
   image, say) still count as several. Processes of one kernel under other
   names (containers, the test cluster's namespaces) count apart, as their
   runtime counts them. */
static void ipmc_own_node(char *node, size_t len)
{
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (NULL != f) {
        if (NULL == fgets(boot, sizeof boot, f)) {
            boot[0] = '\0';
        }
        fclose(f);
        boot[strcspn(boot, "\n")] = '\0';
    }
    snprintf(node, len, "%s%s%s", opal_process_info.nodename, boot[0] ? " " : "", boot);
}

int ipmc_modex_publish(uint64_t digest)
{
    int rc;
    char node[320];
    ipmc_own_node(node, sizeof node);
    /* The node first: a process whose node did not go out publishes that
       ipmc will not run there, so that no member counts its node. */
    OPAL_MODEX_SEND_VALUE(rc, IPMC_MODEX_SCOPE, IPMC_MODEX_NODE_KEY, node, IPMC_MODEX_STRING);
    if (OPAL_SUCCESS != rc) {
        digest = 0;
    }
    OPAL_MODEX_SEND_VALUE(rc, IPMC_MODEX_SCOPE, IPMC_MODEX_KEY, &digest, IPMC_MODEX_UINT64);
    return rc;
}

#if IPMC_MODEX_FETCHES
/* Seconds a process's digest is waited for. A read of another node's data
   asks that node, which answers as soon as the process has published
   (always before its MPI_Init's fence); a key that was never published is
   waited for. A process silent this long does not run ipmc. */
#define IPMC_MODEX_WAIT_S 10

/* Processes that did not publish, so that each costs the wait once per job;
   comm_query may run on several threads. */
static opal_process_name_t *ipmc_silent;
static size_t ipmc_silent_n;
static pthread_mutex_t ipmc_silent_lock = PTHREAD_MUTEX_INITIALIZER;

static int ipmc_is_silent(const opal_process_name_t *name)
{
    int found = 0;
    pthread_mutex_lock(&ipmc_silent_lock);
    for (size_t i = 0; i < ipmc_silent_n && !found; i++) {
        found = 0 == opal_compare_proc(ipmc_silent[i], *name);
    }
    pthread_mutex_unlock(&ipmc_silent_lock);
    return found;
}

static void ipmc_remember_silent(const opal_process_name_t *name)
{
    pthread_mutex_lock(&ipmc_silent_lock);
    opal_process_name_t *grown = realloc(ipmc_silent, (ipmc_silent_n + 1) * sizeof *grown);
    if (NULL != grown) {
        grown[ipmc_silent_n++] = *name;
        ipmc_silent = grown;
    }
    pthread_mutex_unlock(&ipmc_silent_lock);
}

/* Fetches key of another node's process, waiting IPMC_MODEX_WAIT_S; on
   success *kv holds a value of type, which the caller releases. */
static int ipmc_modex_fetch(const opal_process_name_t *name, const char *key, pmix_data_type_t type,
                            pmix_value_t **kv)
{
    pmix_proc_t proc;
    pmix_info_t info;
    int wait = IPMC_MODEX_WAIT_S, rc;
    *kv = NULL;
    if (ipmc_is_silent(name)) {
        return PMIX_ERR_NOT_FOUND;
    }
    OPAL_PMIX_CONVERT_NAME(&proc, name);
    PMIX_INFO_LOAD(&info, PMIX_TIMEOUT, &wait, PMIX_INT);
    rc = PMIx_Get(&proc, key, &info, 1, kv);
    PMIX_INFO_DESTRUCT(&info);
    if (PMIX_SUCCESS == rc && (NULL == *kv || type != (*kv)->type)) {
        rc = PMIX_ERR_TYPE_MISMATCH;
    }
    if (PMIX_SUCCESS != rc) {
        ipmc_remember_silent(name);
        if (NULL != *kv) {
            PMIX_VALUE_RELEASE(*kv);
            *kv = NULL;
        }
    }
    return rc;
}
#endif

/* Reads what member proc published under the digest's key. */
static int ipmc_modex_digest(ompi_proc_t *proc, uint64_t *digest)
{
    uint64_t *ptr = digest;
    int rc;
    OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, IPMC_MODEX_KEY, &proc->super.proc_name, &ptr,
                                   IPMC_MODEX_UINT64);
#if IPMC_MODEX_FETCHES
    /* The own node's data is always here: only another node's is fetched. */
    if (OPAL_SUCCESS != rc && !OPAL_PROC_ON_LOCAL_NODE(proc->super.proc_flags)) {
        pmix_value_t *kv;
        rc = ipmc_modex_fetch(&proc->super.proc_name, IPMC_MODEX_KEY, PMIX_UINT64, &kv);
        if (PMIX_SUCCESS == rc) {
            *digest = kv->data.uint64;
            PMIX_VALUE_RELEASE(kv);
        }
    }
#endif
    return rc;
}

/* Reads what member proc published under the node's key, once its digest
   was read (posted together: a fetch of one brought both). */
static int ipmc_modex_node(ompi_proc_t *proc, char *node, size_t len)
{
    char *found = NULL;
    int rc;
    OPAL_MODEX_RECV_VALUE_OPTIONAL(rc, IPMC_MODEX_NODE_KEY, &proc->super.proc_name, &found,
                                   IPMC_MODEX_STRING);
#if IPMC_MODEX_FETCHES
    if (OPAL_SUCCESS != rc && !OPAL_PROC_ON_LOCAL_NODE(proc->super.proc_flags)) {
        pmix_value_t *kv;
        rc = ipmc_modex_fetch(&proc->super.proc_name, IPMC_MODEX_NODE_KEY, PMIX_STRING, &kv);
        if (PMIX_SUCCESS == rc) {
            found = NULL == kv->data.string ? NULL : strdup(kv->data.string);
            PMIX_VALUE_RELEASE(kv);
        }
    }
#endif
    if (OPAL_SUCCESS != rc || NULL == found) {
        free(found);
        return OPAL_ERR_NOT_FOUND;
    }
    snprintf(node, len, "%s", found);
    free(found);
    return OPAL_SUCCESS;
}

int ipmc_modex_member(struct ompi_communicator_t *comm, int rank, uint64_t *digest, char *node,
                      size_t len)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, rank);
    uint64_t value = 0;
    if (NULL == proc || 0 == len || OPAL_SUCCESS != ipmc_modex_digest(proc, &value)
        || OPAL_SUCCESS != ipmc_modex_node(proc, node, len)) {
        return 0;
    }
    *digest = value;
    return 1;
}

uint64_t ipmc_comm_member_id(struct ompi_communicator_t *comm, int rank)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, rank);
    if (NULL == proc) {
        return UINT64_MAX;
    }
    return ((uint64_t) proc->super.proc_name.jobid << 32) | proc->super.proc_name.vpid;
}

const char *ipmc_comm_member_host(struct ompi_communicator_t *comm, int rank)
{
    ompi_proc_t *proc = ompi_comm_peer_lookup(comm, rank);
    const char *host = NULL == proc ? NULL : opal_get_proc_hostname(&proc->super);
    return NULL == host ? "unknown" : host;
}
