/*
 * The component structure and the MCA parameters of ipmc.
 *
 * Parameters come from one table (../mca-params/ipmc_params.def): it is
 * expanded here into registration and range checks.
 */
#include "ompi_config.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/util/output.h"
#include "opal/util/proc.h"
#include "opal/util/show_help.h"
#include "ompi/runtime/params.h"

#include "coll_ipmc.h"

const char *mca_coll_ipmc_component_version_string = "Open MPI ipmc collective MCA component version " OMPI_VERSION;

ipmc_config_t mca_coll_ipmc_params;
int mca_coll_ipmc_output = -1;

static int ipmc_register(void);
static int ipmc_open(void);
static int ipmc_close(void);
static int ipmc_init_query(bool enable_progress_threads, bool enable_mpi_threads);

const ipmc_coll_component_t mca_coll_ipmc_component = {
    .collm_version = {
        IPMC_COLL_BASE_VERSION,
        .mca_component_name = "ipmc",
        MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, OMPI_RELEASE_VERSION),
        .mca_open_component = ipmc_open,
        .mca_close_component = ipmc_close,
        .mca_register_component_params = ipmc_register,
    },
    .collm_data = {
        /* The component is checkpoint ready */
        MCA_BASE_METADATA_PARAM_CHECKPOINT
    },
    .collm_init_query = ipmc_init_query,
    .collm_comm_query = mca_coll_ipmc_comm_query,
};

#define IPMC_VAR_TYPE_INT MCA_BASE_VAR_TYPE_INT
#define IPMC_VAR_TYPE_SIZE MCA_BASE_VAR_TYPE_SIZE_T
#define IPMC_VAR_TYPE_BOOL MCA_BASE_VAR_TYPE_BOOL
#define IPMC_VAR_TYPE_STRING MCA_BASE_VAR_TYPE_STRING
/* The MCA base copies a string default and owns the copy from then on. */
#define IPMC_INIT_INT(def) (def)
#define IPMC_INIT_SIZE(def) (def)
#define IPMC_INIT_BOOL(def) (def)
#define IPMC_INIT_STRING(def) ((char *) (def))
/* ompi_info shows the allowed range with the help text. */
#define IPMC_HELP_INT(help, min, max) help " (allowed: " #min " to " #max ")"
#define IPMC_HELP_SIZE(help, min, max) help " (allowed: " #min " to " #max ")"
#define IPMC_HELP_BOOL(help, min, max) help
#define IPMC_HELP_STRING(help, min, max) help
/* ... and which parameters every rank must set alike (comm_query compares them). */
#define IPMC_SCOPE_NOTE_ALL_EQ ". Must be the same on every rank"
#define IPMC_SCOPE_NOTE_LOCAL ""

/* Whether the Open MPI that loaded this DSO is of the series it was built
   for. A DSO left in a component directory across an upgrade is loaded by
   another series, whose structures and internal calls differ, so this runs
   before anything series-specific: it calls only MPI's own
   MPI_Get_library_version (the same in every series, callable before
   MPI_Init) and the C library. On a mismatch it says so once per job, at
   coll_ipmc_verbose >= 1 given on the command line or in the environment (the
   parameter itself cannot be registered with another series). */
static bool ipmc_series_matches(void)
{
    /* Larger than MPI_MAX_LIBRARY_VERSION_STRING of any series. */
    char version[4096] = "";
    int len = 0, major = -1, minor = -1;
    const char *verbose = getenv("OMPI_MCA_coll_ipmc_verbose");
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");

    if (MPI_SUCCESS == PMPI_Get_library_version(version, &len)
        && 2 == sscanf(version, "Open MPI v%d.%d", &major, &minor)
        && OMPI_MAJOR_VERSION == major && OMPI_MINOR_VERSION == minor) {
        return true;
    }
    if (NULL != verbose && atoi(verbose) >= 1 && (NULL == rank || 0 == strcmp(rank, "0"))) {
        fprintf(stderr,
                "ipmc: this mca_coll_ipmc.so was built for Open MPI %d.%d and was loaded by %.*s; "
                "ipmc steps aside. Rebuild it for this Open MPI.\n",
                OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION, (int) strcspn(version, ","),
                '\0' == version[0] ? "another MPI library" : version);
    }
    return false;
}

/* The names of the enumerated parameters' values (IPMC_NAMES rows), from
   the parameter's min on, NULL-terminated. */
#define IPMC_PARAM(name, type, def, min, max, level, scope, help)
#define IPMC_NAMES(name, ...) static const char *const ipmc_names_##name[] = {__VA_ARGS__, NULL};
#include "../mca-params/ipmc_params.def"
#undef IPMC_NAMES
#undef IPMC_PARAM

/* An enumerator of `name`'s values from `min` on (NULL where the table
   names none, or on failure: the parameter then takes numbers only). The
   caller releases it once registered (the variable keeps a reference). */
static mca_base_var_enum_t *ipmc_enumerator(const char *name, int min)
{
    static const struct {
        const char *param;
        const char *const *names;
    } tables[] = {
#define IPMC_PARAM(name, type, def, min, max, level, scope, help)
#define IPMC_NAMES(name, ...) {#name, ipmc_names_##name},
#include "../mca-params/ipmc_params.def"
#undef IPMC_NAMES
#undef IPMC_PARAM
    };
    mca_base_var_enum_value_t values[16];
    mca_base_var_enum_t *enumerator = NULL;
    char enum_name[64];

    for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
        if (0 != strcmp(tables[t].param, name)) {
            continue;
        }
        int n = 0;
        for (; NULL != tables[t].names[n] && n < 15; n++) {
            values[n] = (mca_base_var_enum_value_t){min + n, tables[t].names[n]};
        }
        values[n] = (mca_base_var_enum_value_t){0, NULL};
        snprintf(enum_name, sizeof(enum_name), "coll_ipmc_%s_values", name);
        if (OPAL_SUCCESS != mca_base_var_enum_create(enum_name, values, &enumerator)) {
            enumerator = NULL;
        }
    }
    return enumerator;
}

static int ipmc_register(void)
{
    mca_base_var_enum_t *values;

    if (!ipmc_series_matches()) {
        /* Open MPI's cue to leave the component out silently: no parameter,
           no open, no query. */
        return OMPI_ERR_NOT_AVAILABLE;
    }
#define IPMC_PARAM(name, type, def, min, max, level, scope, help)                              \
    mca_coll_ipmc_params.name = IPMC_INIT_##type(def);                                         \
    values = ipmc_enumerator(#name, (int) (min));                                              \
    (void) mca_base_component_var_register(&mca_coll_ipmc_component.collm_version, #name,        \
                                           IPMC_HELP_##type(help, min, max)                    \
                                               IPMC_SCOPE_NOTE_##scope,                        \
                                           IPMC_VAR_TYPE_##type, values, 0, 0,                 \
                                           OPAL_INFO_LVL_##level, MCA_BASE_VAR_SCOPE_##scope,  \
                                           &mca_coll_ipmc_params.name);                        \
    if (NULL != values) {                                                                      \
        OBJ_RELEASE(values);                                                                   \
    }
#include "../mca-params/ipmc_params.def"
#undef IPMC_PARAM
    mca_coll_ipmc_register_pvars();
    return OMPI_SUCCESS;
}

/* Lets opal_show_help find help-coll-ipmc.txt beside the installed DSO. */
static void ipmc_add_help_dir(void)
{
    Dl_info info;
    char path[PATH_MAX];
    if (0 == dladdr((const void *) &mca_coll_ipmc_component, &info) || NULL == info.dli_fname) {
        return;
    }
    if (strlen(info.dli_fname) >= sizeof(path)) {
        return;
    }
    strcpy(path, info.dli_fname);
    (void) opal_show_help_add_dir(dirname(path));
}

static bool ipmc_params_in_range_quiet(void);

/* Whether the job runs with fault tolerance (User-Level Failure Mitigation,
   mpirun --with-ft ulfm; Open MPI 5.0 and later). Its users expect a
   collective to return a failed process's error on every survivor; ipmc's
   node segment waits in shared memory, where no such error reaches it, so
   ipmc leaves such jobs to Open MPI's fault-tolerant components. */
static bool ipmc_fault_tolerance_on(void)
{
#if OPAL_ENABLE_FT_MPI
    return ompi_ftmpi_enabled;
#else
    return false;
#endif
}

/* Tells every peer, through the modex, which configuration ipmc runs with
   here (0: it will not run): open comes before MPI_Init's modex fence, and
   comm_query compares the members' values without a message. */
static void ipmc_publish_config(void)
{
    uint64_t digest = 0;
    if (ipmc_params_in_range_quiet() && !ipmc_fault_tolerance_on()) {
        digest = ipmc_rs_config_digest(&mca_coll_ipmc_params);
    }
    (void) ipmc_modex_publish(digest);
}

static int ipmc_open(void)
{
    mca_coll_ipmc_output = opal_output_open(NULL);
    opal_output_set_verbosity(mca_coll_ipmc_output, mca_coll_ipmc_params.verbose);
    ipmc_add_help_dir();
    ipmc_publish_config();
    return OMPI_SUCCESS;
}

static int ipmc_close(void)
{
    ipmc_progress_unregister();
    if (mca_coll_ipmc_output >= 0) {
        opal_output_close(mca_coll_ipmc_output);
        mca_coll_ipmc_output = -1;
    }
    return OMPI_SUCCESS;
}

/* Refuses a value outside its row's range. Every rank refuses it (the values
   are the same everywhere), and the first process of the job tells the user
   once, in Open MPI's help style. */
static bool ipmc_in_range(const char *name, long long value, long long min, long long max)
{
    char *msg;
    if (value >= min && value <= max) {
        return true;
    }
    if (0 == opal_proc_local_get()->proc_name.vpid) {
        msg = opal_show_help_string("help-coll-ipmc.txt", "param out of range", true, name, value,
                                    min, max, name);
        if (NULL != msg) {
            opal_output(0, "%s", msg);
            free(msg);
        }
    }
    opal_output_verbose(1, mca_coll_ipmc_output, "ipmc: %s=%lld is outside %lld..%lld; ipmc steps aside",
                        name, value, min, max);
    return false;
}

static bool ipmc_params_in_range(void)
{
    bool ok = true;
#define IPMC_CHECK_INT(name, min, max)                                                         \
    ok &= ipmc_in_range("coll_ipmc_" #name, mca_coll_ipmc_params.name, min, max);
/* size_t values above LLONG_MAX are out of every range in the table. */
#define IPMC_CHECK_SIZE(name, min, max)                                                        \
    ok &= ipmc_in_range("coll_ipmc_" #name,                                                    \
                        mca_coll_ipmc_params.name > (size_t) LLONG_MAX                         \
                            ? LLONG_MAX : (long long) mca_coll_ipmc_params.name,               \
                        min, max);
#define IPMC_CHECK_BOOL(name, min, max)
#define IPMC_CHECK_STRING(name, min, max)
#define IPMC_PARAM(name, type, def, min, max, level, scope, help) IPMC_CHECK_##type(name, min, max)
#include "../mca-params/ipmc_params.def"
#undef IPMC_PARAM
    return ok;
}

/* As ipmc_params_in_range, without telling anyone. */
static bool ipmc_params_in_range_quiet(void)
{
    bool ok = true;
#undef IPMC_CHECK_INT
#undef IPMC_CHECK_SIZE
#define IPMC_CHECK_INT(name, min, max)                                                         \
    ok &= mca_coll_ipmc_params.name >= (min) && mca_coll_ipmc_params.name <= (max);
#define IPMC_CHECK_SIZE(name, min, max)                                                        \
    ok &= mca_coll_ipmc_params.name <= (size_t) LLONG_MAX                                      \
          && (long long) mca_coll_ipmc_params.name >= (min)                                    \
          && (long long) mca_coll_ipmc_params.name <= (max);
#define IPMC_PARAM(name, type, def, min, max, level, scope, help) IPMC_CHECK_##type(name, min, max)
#include "../mca-params/ipmc_params.def"
#undef IPMC_PARAM
#undef IPMC_CHECK_INT
#undef IPMC_CHECK_SIZE
    return ok;
}

static int ipmc_init_query(bool enable_progress_threads, bool enable_mpi_threads)
{
    (void) enable_progress_threads;
    (void) enable_mpi_threads;
    char err[512];
    char *msg;
    int rc;

    if (!ipmc_params_in_range()) {
        /* Step aside: the job runs with Open MPI's other components. */
        return OMPI_ERR_NOT_AVAILABLE;
    }
    if (ipmc_fault_tolerance_on()) {
        if (0 == opal_proc_local_get()->proc_name.vpid) {
            opal_output_verbose(1, mca_coll_ipmc_output,
                                "ipmc: fault tolerance is on (mpi_ft_enable): ipmc steps aside "
                                "for Open MPI's fault-tolerant collectives");
        }
        return OMPI_ERR_NOT_AVAILABLE;
    }
    err[0] = '\0';
    rc = ipmc_rs_init_query(&mca_coll_ipmc_params, err, sizeof(err));
    if (OMPI_SUCCESS != rc && '\0' != err[0]) {
        if (0 == opal_proc_local_get()->proc_name.vpid) {
            msg = opal_show_help_string("help-coll-ipmc.txt", "param invalid", true, err);
            if (NULL != msg) {
                opal_output(0, "%s", msg);
                free(msg);
            }
        }
        opal_output_verbose(1, mca_coll_ipmc_output, "ipmc: %s; ipmc steps aside", err);
    }
    return rc;
}
