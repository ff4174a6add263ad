/*
 * The boundary between the C glue and the Rust core of ipmc.
 *
 * Rust sees only this header (through bindgen and ../wrapper.h): Open MPI's
 * objects are opaque here, their layouts stay on the C side. Functions named
 * ipmc_* are implemented in C (ipmc_glue.c) and called by Rust; functions named
 * ipmc_rs_* are implemented in Rust (src/ffi/exports.rs) and called by C.
 */
#ifndef IPMC_GLUE_H
#define IPMC_GLUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ompi_communicator_t;
struct ompi_datatype_t;
struct ompi_request_t;
/* ipmc's module (mca_coll_ipmc_module_t), opaque: its Open MPI type differs by series. */
struct ipmc_module;

/* A snapshot of the MCA parameters, one field per row of the table. */
#define IPMC_CTYPE_INT int
#define IPMC_CTYPE_SIZE size_t
#define IPMC_CTYPE_BOOL bool
#define IPMC_CTYPE_STRING char *
typedef struct ipmc_config {
#define IPMC_PARAM(name, type, def, min, max, level, scope, help) IPMC_CTYPE_##type name;
#include "../mca-params/ipmc_params.def"
#undef IPMC_PARAM
} ipmc_config_t;

/* ---- implemented in C, called by Rust ---------------------------------- */

/* Communicator facts. */
int ipmc_comm_rank(struct ompi_communicator_t *comm);
int ipmc_comm_size(struct ompi_communicator_t *comm);
int ipmc_comm_is_inter(struct ompi_communicator_t *comm);
uint32_t ipmc_comm_cid(struct ompi_communicator_t *comm);
const char *ipmc_comm_name(struct ompi_communicator_t *comm);
/* This process's rank in its job: MPI_COMM_WORLD's, and valid also in a
   program of MPI sessions that never made MPI_COMM_WORLD. */
int ipmc_world_rank(void);

/* The tag of Open MPI's broadcasts, which ipmc's blocking broadcasts use
   too, and the tag of ipmc's work that outlives a call (chains, votes,
   nonblocking broadcasts), so that a blocking broadcast by another
   algorithm may run while that work still goes on. */
int ipmc_bcast_tag(void);
int ipmc_queue_tag(void);
/* Point-to-point on the communicator, bytes only. */
int ipmc_isend_bytes(const void *buf, size_t len, int dst, int tag,
                     struct ompi_communicator_t *comm, struct ompi_request_t **req);
int ipmc_irecv_bytes(void *buf, size_t len, int src, int tag, struct ompi_communicator_t *comm,
                     struct ompi_request_t **req);
/* As ipmc_isend_bytes, in synchronous mode: the request completes only once
   the receiver has matched the message, also where Open MPI would send it
   eagerly and complete it at once. */
int ipmc_issend_bytes(const void *buf, size_t len, int dst, int tag,
                      struct ompi_communicator_t *comm, struct ompi_request_t **req);
/* Empty messages with the barrier tag, not the bcast or queue tag, so that
   they never meet those: a measured broadcast's answers, which time it at its root (every
   other rank sends the root one after its part of the call; the root waits
   for them in the call for a bounded time only, then receives the rest while
   it goes on, since a rank may depend on what the root does after the call),
   and ipmc's barrier's arrivals (each rank to its parent in the barrier's
   tree, received within the call) and point-to-point releases (each parent
   to its children; a rank that the release datagram freed receives its own
   later, before its next barrier or when the communicator is freed). Nor do
   they meet each other or a replaced barrier's messages: collectives on a
   communicator are called in one order, each such message is sent within
   its call, the kinds between two ranks differ by direction but for the
   answers, and receives from one sender with one tag match its messages in
   the order they were posted. */
int ipmc_answer_root(int root, struct ompi_communicator_t *comm);
int ipmc_irecv_answer(int src, struct ompi_communicator_t *comm, struct ompi_request_t **req);
int ipmc_isend_empty(int dst, struct ompi_communicator_t *comm, struct ompi_request_t **req);
/* Waits for and frees the requests (every entry is MPI_REQUEST_NULL
   afterwards), and stores in counts[i] the bytes request i received (for a
   send, what it sent). */
int ipmc_wait_all_counts(size_t n, struct ompi_request_t **reqs, size_t *counts);

/* Tests a request; when it completed, frees it (*req becomes MPI_REQUEST_NULL),
   sets *done and stores the bytes received in *count. */
int ipmc_test(struct ompi_request_t **req, int *done, size_t *count);
/* Waits for a request as ipmc_test would find it done. */
int ipmc_wait(struct ompi_request_t **req, size_t *count);
/* As ipmc_test, but only looks at the request, without driving Open MPI's
   progress engine: for use from inside it. */
int ipmc_look(struct ompi_request_t **req, int *done, size_t *count);
/* Asks Open MPI to cancel a pending receive (then wait for it). */
int ipmc_cancel(struct ompi_request_t *req);

/* Keeps the communicator alive (a reference) while a broadcast finishes in
   the background, and lets it go; the release may destroy it. */
void ipmc_comm_retain(struct ompi_communicator_t *comm);
void ipmc_comm_release(struct ompi_communicator_t *comm);

/* Whether another rank of the communicator runs on this node. */
int ipmc_comm_has_local_peer(struct ompi_communicator_t *comm);

/* Whether the communicator belongs to the world model (MPI_Init's), not to
   an MPI session (Open MPI 5.0), which may end before the process does. */
int ipmc_comm_of_world_model(struct ompi_communicator_t *comm);

/* The value of the communicator's info key `key` (set by whoever created
   it), cut to fit `len` bytes with its terminator; returns its whole length,
   or -1 where the key is unset. */
int ipmc_comm_info(struct ompi_communicator_t *comm, const char *key, char *value, int len);

/* The two levels of a communicator whose nodes hold several ranks: splits
   `comm` as MPI_Comm_split does (collective; color < 0: this rank is in no
   part, and *out is NULL) and names the part `name`, which ipmc does not
   serve if `without_ipmc`; frees such a part (and sets it to NULL); names a
   part anew when a later communicator takes it over. */
int ipmc_comm_split(struct ompi_communicator_t *comm, int color, int key, int without_ipmc,
                    const char *name, struct ompi_communicator_t **out);
void ipmc_comm_free(struct ompi_communicator_t **comm);
void ipmc_comm_rename(struct ompi_communicator_t *comm, const char *name);

/* Datatypes. */
size_t ipmc_dt_size(struct ompi_datatype_t *dt);
/* Whether `count` elements of `dt` at `buf` can be read and written where
   they lie: laid out contiguously, in the host's memory (not a GPU's). */
int ipmc_dt_in_place(const void *buf, struct ompi_datatype_t *dt, int count);
ptrdiff_t ipmc_dt_true_lb(struct ompi_datatype_t *dt);
/* MPI_BYTE: Open MPI's algorithms that ipmc calls itself get a message as
   its packed bytes, so that every rank passes the same count and datatype. */
struct ompi_datatype_t *ipmc_dt_byte(void);
int ipmc_pack(const void *buf, int count, struct ompi_datatype_t *dt, void *out, size_t len);
int ipmc_unpack(const void *in, size_t len, void *buf, int count, struct ompi_datatype_t *dt);

/* The broadcast of the component that ipmc replaced on this communicator. */
int ipmc_prev_bcast(struct ipmc_module *module, void *buf, int count,
                    struct ompi_datatype_t *dt, int root, struct ompi_communicator_t *comm);
/* The arguments of one MPI_Allgather or MPI_Allgatherv; sbuf is NULL for
   MPI_IN_PLACE (this rank's block is already in rbuf). An allgather's blocks
   are rcount elements each, one after the other (rcounts and displs NULL);
   an allgatherv's block i is rcounts[i] elements from displs[i]. */
typedef struct ipmc_allgather_args {
    const void *sbuf;
    int scount;
    struct ompi_datatype_t *sdtype;
    void *rbuf;
    int rcount;
    const int *rcounts;
    const int *displs;
    struct ompi_datatype_t *rdtype;
} ipmc_allgather_args_t;
/* The allgather (allgatherv) of the component that ipmc replaced on this
   communicator. */
int ipmc_prev_allgather(struct ipmc_module *module, const ipmc_allgather_args_t *args,
                        struct ompi_communicator_t *comm);
/* Open MPI's ring allgather (ompi_coll_base_allgather_intra_ring, tuned's
   algorithm 4; ompi_coll_base_allgatherv_intra_ring for an allgatherv), on
   ipmc's module. */
int ipmc_base_allgather_ring(struct ipmc_module *module, const ipmc_allgather_args_t *args,
                             struct ompi_communicator_t *comm);
/* Where block i of the receive buffer starts (i times rcount, or displs[i],
   extents of rdtype from rbuf). */
void *ipmc_allgather_block(const ipmc_allgather_args_t *args, int i);
/* The barrier of the component that ipmc replaced on this communicator. */
int ipmc_prev_barrier(struct ipmc_module *module, struct ompi_communicator_t *comm);
/* Open MPI's linear barrier (ompi_coll_base_barrier_intra_basic_linear: every
   rank to rank 0, then rank 0 to every rank), on ipmc's module: the one coll
   tuned calls 1. */
int ipmc_base_barrier_linear(struct ipmc_module *module, struct ompi_communicator_t *comm);
/* A barrier on a part of two levels, with whatever serves it. */
int ipmc_comm_barrier(struct ompi_communicator_t *comm);
/* An allgather over two levels, in bytes, on its parts with whatever serves
   them: a gatherv of each rank's len bytes to rank `root` of a node's part
   (counts and displs read on the root only), an allgatherv in place among
   the leaders (counts[i] bytes at displs[i] of buf for leader i), and a
   broadcast of len bytes. */
int ipmc_comm_gatherv_bytes(struct ompi_communicator_t *comm, const void *sbuf, int len,
                            void *rbuf, const int *counts, const int *displs, int root);
int ipmc_comm_allgatherv_bytes(struct ompi_communicator_t *comm, void *buf, const int *counts,
                               const int *displs);
int ipmc_comm_bcast_bytes(struct ompi_communicator_t *comm, void *buf, int len, int root);
/* The element-wise maximum of n ints over a communicator, in place, by
   coll/base's recursive doubling (collective). */
int ipmc_comm_allreduce_max_ints(struct ompi_communicator_t *comm, int *v, int n);
/* Starts a nonblocking broadcast of len bytes on a part of two levels, with
   whatever serves it (a step of an MPI_Ibcast over the levels); test *req
   with ipmc_test or ipmc_look. */
int ipmc_comm_ibcast_bytes(struct ompi_communicator_t *comm, void *buf, int len, int root,
                           struct ompi_request_t **req);
/* Open MPI's binomial tree from coll/base (ompi_coll_base_bcast_intra_binomial),
   on ipmc's module: the fixed algorithm that coll tuned calls 6. */
int ipmc_base_bcast_binomial(struct ipmc_module *module, void *buf, int count,
                             struct ompi_datatype_t *dt, int root,
                             struct ompi_communicator_t *comm);
/* Open MPI's binary tree (ompi_coll_base_bcast_intra_bintree), unsegmented:
   coll tuned's fixed algorithm 5. */
int ipmc_base_bcast_bintree(struct ipmc_module *module, void *buf, int count,
                            struct ompi_datatype_t *dt, int root,
                            struct ompi_communicator_t *comm);
/* Open MPI's split binary tree (ompi_coll_base_bcast_intra_split_bintree),
   unsegmented: coll tuned's fixed algorithm 4. */
int ipmc_base_bcast_split_bintree(struct ipmc_module *module, void *buf, int count,
                                  struct ompi_datatype_t *dt, int root,
                                  struct ompi_communicator_t *comm);
/* Open MPI's scatter and ring allgather
   (ompi_coll_base_bcast_intra_scatter_allgather_ring), unsegmented: coll
   tuned's fixed algorithm 9. */
int ipmc_base_bcast_scatter_allgather(struct ipmc_module *module, void *buf, int count,
                                      struct ompi_datatype_t *dt, int root,
                                      struct ompi_communicator_t *comm);

/* The requests of ipmc's nonblocking broadcasts. ipmc_request_new makes one
   with two references, ipmc's and the user's; ipmc_request_drop releases
   both (the call was not served); ipmc_request_complete completes it with
   an MPI error code (unless the user freed it) and releases ipmc's. */
struct ompi_request_t *ipmc_request_new(struct ompi_communicator_t *comm);
void ipmc_request_drop(struct ompi_request_t *req);
void ipmc_request_complete(struct ompi_request_t *req, int error);
/* Keeps a datatype alive while a nonblocking broadcast uses it, and lets it go. */
void ipmc_dt_retain(struct ompi_datatype_t *dt);
void ipmc_dt_release(struct ompi_datatype_t *dt);

/* Output: a line at a verbosity level (shown when coll_ipmc_verbose >= level),
   and a line that is always shown. */
void ipmc_log(int level, const char *line);
void ipmc_print(const char *line);

/* Registers ipmc's callback with Open MPI's progress engine (once), and
   removes it (at component close). */
void ipmc_progress_register(void);
void ipmc_progress_unregister(void);
/* One turn of Open MPI's progress engine, for a rank that waits on memory
   it shares with its node (which moves nothing of Open MPI's). */
void ipmc_progress_once(void);
/* Makes MPI_Finalize call ipmc_rs_finish_all first (an attribute of
   MPI_COMM_SELF, whose deletion MPI_Finalize begins with); once. */
void ipmc_finish_at_finalize(void);
/* The modex (Open MPI's per-process data, exchanged once at MPI_Init): this
   process's ipmc configuration digest (0: ipmc will not run here) and its
   node (host name and the kernel's boot id), published from the component's
   open; and what a member published: 1, *digest and its node in node
   (truncated to len bytes, terminated) if it published both, 0 if not (ipmc
   not installed or not loaded there). Every member reads the same published
   values, where the runtime's own host names of another job's processes
   (MPI_Comm_spawn) may be known to some ranks only. With 4.1 the data came
   with MPI_Init's fence (or MPI_Comm_spawn's connection); 5.0 fetches another
   node's on demand, and a process that never published costs a wait of 10 s,
   once per job. */
int ipmc_modex_publish(uint64_t digest);
int ipmc_modex_member(struct ompi_communicator_t *comm, int rank, uint64_t *digest, char *node,
                      size_t len);
/* Who a member of the communicator is in the whole run (its job and its rank
   there, as one number), the same on every communicator it belongs to: the
   key under which ipmc keeps what it read of the member's modex.
   UINT64_MAX if Open MPI does not know the member here. */
uint64_t ipmc_comm_member_id(struct ompi_communicator_t *comm, int rank);
/* The host name of a member of the communicator ("unknown" if not known). */
const char *ipmc_comm_member_host(struct ompi_communicator_t *comm, int rank);

/* ---- implemented in Rust, called by C ----------------------------------- */

/* Once per process; returns an OMPI error code. When a parameter's value is
   invalid, writes what is wrong (NUL-terminated) into err[0..err_len). */
int ipmc_rs_init_query(const ipmc_config_t *cfg, char *err, size_t err_len);
/* The digest of every parameter that must be equal on all ranks (never 0),
   or 0 if ipmc will not run with these values (disabled or invalid). */
uint64_t ipmc_rs_config_digest(const ipmc_config_t *cfg);
/* Rust's per-communicator state: opaque to C, owned by Rust. */
struct ipmc_rs_module;

/* NULL declines the communicator; otherwise the per-communicator state. */
struct ipmc_rs_module *ipmc_rs_comm_query(struct ompi_communicator_t *comm, const ipmc_config_t *cfg, int *priority);
int ipmc_rs_module_enable(struct ipmc_rs_module *state, struct ipmc_module *module,
                          struct ompi_communicator_t *comm);
/* Called when the communicator is freed (maybe more than once); no MPI calls. */
void ipmc_rs_module_disable(struct ipmc_rs_module *state, struct ompi_communicator_t *comm);
/* Releases the state; NULL is nothing to release. No MPI calls. */
void ipmc_rs_module_destroy(struct ipmc_rs_module *state);
/* One turn of the broadcasts finishing in the background; returns how many finished. */
int ipmc_rs_progress(void);
/* Finishes every broadcast still in the background (at MPI_Finalize). */
void ipmc_rs_finish_all(void);
int ipmc_rs_bcast(struct ipmc_rs_module *state, void *buf, int count, struct ompi_datatype_t *dt, int root,
                  struct ompi_communicator_t *comm, struct ipmc_module *module);

/* One MPI_Allgather or MPI_Allgatherv on a communicator whose allgather
   (allgatherv) ipmc serves. */
int ipmc_rs_allgather(struct ipmc_rs_module *state, const ipmc_allgather_args_t *args,
                      struct ompi_communicator_t *comm, struct ipmc_module *module);
/* One MPI_Barrier on a communicator whose barrier ipmc serves. */
int ipmc_rs_barrier(struct ipmc_rs_module *state, struct ompi_communicator_t *comm, struct ipmc_module *module);

/* What ipmc_rs_ibcast returns when the replaced component's nonblocking
   broadcast is to serve the call. */
#define IPMC_PREVIOUS 1
/* One MPI_Ibcast: OMPI_SUCCESS when ipmc serves it and will complete req
   (ipmc_request_complete), IPMC_PREVIOUS, or an error code. */
int ipmc_rs_ibcast(struct ipmc_rs_module *state, void *buf, int count, struct ompi_datatype_t *dt, int root,
                   struct ompi_communicator_t *comm, struct ompi_request_t *req);

/* MPI_T performance variables, one per statistic. ipmc_rs_pvar_info describes
   variable i: copies its name and description (NUL-terminated, cut to fit) and
   returns 0 for a counter, 1 for a state; -1 when there is no variable i. */
int ipmc_rs_pvar_info(int i, char *name, size_t name_len, char *desc, size_t desc_len);
/* The value of variable i in a communicator's state (no broadcast on that
   communicator may run at the same time). */
uint64_t ipmc_rs_pvar_read(const struct ipmc_rs_module *state, int i);

#endif /* IPMC_GLUE_H */
