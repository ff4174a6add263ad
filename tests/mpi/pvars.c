/*
 * Lists ipmc's MPI_T performance variables, starts every one on a duplicate of
 * MPI_COMM_WORLD (named "pvars"), runs broadcasts on it and reads them back.
 *
 *   pvars [--bcasts N] [--bytes B] [--out DIR]
 *
 * Rank 0 prints one line per variable:
 *   pvars: var name=coll_ipmc_sent class=counter type=ull bind=comm continuous=0 readonly=1 desc="..."
 * every rank prints its values after the broadcasts:
 *   pvars: rank=R bcasts=N coll_ipmc_bcasts=N coll_ipmc_sent=... (one field per variable)
 * and rank 0 ends with "pvars: PASS" when every broadcast delivered its bytes.
 * With --out, the lines of the listing and of each rank go to DIR/vars.txt and
 * DIR/rank.R.txt instead (mpirun may interleave long output of several ranks).
 * Exits non-zero when a call fails or no coll_ipmc_ variable exists.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VARS 128

static void check(int rc, const char *what)
{
    if (MPI_SUCCESS != rc) {
        fprintf(stderr, "pvars: %s failed (%d)\n", what, rc);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

/* Where this rank's lines go: stdout, or a file of its own under --out. */
static FILE *open_out(const char *dir, const char *name)
{
    char path[4096];
    FILE *f;
    if (NULL == dir) {
        return stdout;
    }
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    if (NULL == f) {
        fprintf(stderr, "pvars: cannot write %s\n", path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return f;
}

static const char *class_name(int c)
{
    switch (c) {
    case MPI_T_PVAR_CLASS_STATE: return "state";
    case MPI_T_PVAR_CLASS_COUNTER: return "counter";
    default: return "other";
    }
}

int main(int argc, char **argv)
{
    const char *out_dir = NULL;
    FILE *out;
    int bcasts = 20, bytes = 65536, provided, rank, size, num, nvars = 0, failures = 0;
    int index[MAX_VARS];
    MPI_Datatype type[MAX_VARS];
    char names[MAX_VARS][128];
    MPI_T_pvar_session session;
    MPI_T_pvar_handle handle[MAX_VARS];
    MPI_Comm comm;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (0 == strcmp(argv[i], "--bcasts")) {
            bcasts = atoi(argv[i + 1]);
        } else if (0 == strcmp(argv[i], "--bytes")) {
            bytes = atoi(argv[i + 1]);
        } else if (0 == strcmp(argv[i], "--out")) {
            out_dir = argv[i + 1];
        }
    }
    /* Whole lines: mpirun forwards every rank's output in the chunks written. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    check(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided), "MPI_T_init_thread");
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_name(comm, "pvars");

    /* List: every variable whose name starts with coll_ipmc_. */
    out = 0 == rank ? open_out(out_dir, "vars.txt") : NULL;
    check(MPI_T_pvar_get_num(&num), "MPI_T_pvar_get_num");
    for (int i = 0; i < num && nvars < MAX_VARS; ++i) {
        char name[128], desc[1024];
        int name_len = sizeof(name), desc_len = sizeof(desc), verbosity, bind, readonly,
            continuous, atomic;
        MPI_T_enum enumtype;
        MPI_Datatype dt;
        int c;
        /* Variables of components that were closed are no longer valid. */
        if (MPI_SUCCESS != MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &c, &dt, &enumtype,
                                               desc, &desc_len, &bind, &readonly, &continuous,
                                               &atomic)
            || 0 != strncmp(name, "coll_ipmc_", 10)) {
            continue;
        }
        if (0 == rank) {
            fprintf(out, "pvars: var name=%s class=%s type=%s bind=%s continuous=%d readonly=%d desc=\"%s\"\n",
                   name, class_name(c), MPI_UNSIGNED_LONG_LONG == dt ? "ull" : MPI_INT == dt ? "int" : "other",
                   MPI_T_BIND_MPI_COMM == bind ? "comm" : "other", continuous, readonly, desc);
        }
        strcpy(names[nvars], name);
        index[nvars] = i;
        type[nvars] = dt;
        ++nvars;
    }
    if (NULL != out && stdout != out) {
        fclose(out);
    }
    if (0 == nvars) {
        fprintf(stderr, "pvars: no coll_ipmc_ performance variable\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }

    /* Start: one handle per variable, bound to comm. */
    check(MPI_T_pvar_session_create(&session), "MPI_T_pvar_session_create");
    for (int v = 0; v < nvars; ++v) {
        int count, rc;
        check(MPI_T_pvar_handle_alloc(session, index[v], &comm, &handle[v], &count),
              "MPI_T_pvar_handle_alloc");
        if (1 != count) {
            fprintf(stderr, "pvars: %s has %d values\n", names[v], count);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        rc = MPI_T_pvar_start(session, handle[v]);
        if (MPI_SUCCESS != rc && MPI_T_ERR_PVAR_NO_STARTSTOP != rc) {
            check(rc, "MPI_T_pvar_start");
        }
    }

    /* Broadcasts from rank 0, every byte checked. */
    unsigned char *buf = malloc(bytes > 0 ? bytes : 1);
    for (int b = 0; b < bcasts; ++b) {
        for (int i = 0; i < bytes; ++i) {
            buf[i] = 0 == rank ? (unsigned char) (i * 7 + b) : 0;
        }
        check(MPI_Bcast(buf, bytes, MPI_BYTE, 0, comm), "MPI_Bcast");
        for (int i = 0; i < bytes; ++i) {
            if (buf[i] != (unsigned char) (i * 7 + b)) {
                ++failures;
                break;
            }
        }
    }
    free(buf);

    /* Read. */
    char line[8192];
    int len = snprintf(line, sizeof(line), "pvars: rank=%d bcasts=%d bytes=%d", rank, bcasts, bytes);
    for (int v = 0; v < nvars; ++v) {
        unsigned long long ull = 0;
        int i = 0;
        if (MPI_INT == type[v]) {
            check(MPI_T_pvar_read(session, handle[v], &i), "MPI_T_pvar_read");
            ull = (unsigned long long) i;
        } else {
            check(MPI_T_pvar_read(session, handle[v], &ull), "MPI_T_pvar_read");
        }
        len += snprintf(line + len, sizeof(line) - len, " %s=%llu", names[v], ull);
    }
    char file[64];
    snprintf(file, sizeof(file), "rank.%d.txt", rank);
    out = open_out(out_dir, file);
    fprintf(out, "%s\n", line);
    if (stdout != out) {
        fclose(out);
    }

    for (int v = 0; v < nvars; ++v) {
        MPI_T_pvar_handle_free(session, &handle[v]);
    }
    MPI_T_pvar_session_free(&session);
    /* Before MPI_Finalize: Open MPI 4.1 crashes in an MPI_T_finalize after it. */
    MPI_T_finalize();
    MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_free(&comm);
    if (0 == rank) {
        printf("pvars: %s\n", 0 == failures ? "PASS" : "FAIL");
    }
    MPI_Finalize();
    return 0 == failures ? 0 : 1;
}
