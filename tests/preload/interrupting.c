/*
 * Preloaded into a test's ranks (LD_PRELOAD): from the return of MPI_Init
 * (or MPI_Init_thread) until the process exits, a timer raises SIGALRM every
 * INTERRUPTING_US microseconds (default 100), caught by a handler installed
 * without SA_RESTART, so that any blocking system call of the process (Open
 * MPI's, ipmc's and its threads', the program's) may return EINTR, as in a
 * program that profiles itself with a timer or takes SIGALRM for its own
 * ends.
 *
 * Not before MPI_Init has returned: Open MPI's own start (PMIx's connection
 * to its server) fails now and then when a signal cuts it short, with or
 * without ipmc, which this library is not there to test. Of ipmc's work,
 * only its set-up of MPI_COMM_WORLD falls inside MPI_Init; what that starts
 * goes on in ipmc's background thread, and the collectives, with their
 * two-level split and shared segments, all come after.
 *
 * A POSIX timer (timer_create), not setitimer: it is deleted at exec, so a
 * wrapper such as env(1) that loads this library first does not pass an
 * armed timer to the program.
 *
 * At exit it prints "interrupting: pid=P signals=N" to stderr, so that a
 * test can tell that the signals came.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t signals;

static void on_alarm(int signo)
{
    (void) signo;
    signals++;
}

static void fail(const char *what)
{
    perror(what);
    abort();
}

/* Starts the signals (once): a handler without SA_RESTART, then the timer. */
static void start(void)
{
    static int started;
    struct sigaction sa;
    struct sigevent ev;
    struct itimerspec every;
    timer_t timer;
    const char *us = getenv("INTERRUPTING_US");
    long period_us = us ? atol(us) : 100;

    if (started++) {
        return;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0) {
        fail("interrupting: sigaction");
    }
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGALRM;
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) {
        fail("interrupting: timer_create");
    }
    every.it_interval.tv_sec = period_us / 1000000;
    every.it_interval.tv_nsec = period_us % 1000000 * 1000;
    every.it_value = every.it_interval;
    if (timer_settime(timer, 0, &every, NULL) != 0) {
        fail("interrupting: timer_settime");
    }
}

/* The next definition of `name` after this library's: the MPI library's. */
static void *next(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        fprintf(stderr, "interrupting: no %s after this library\n", name);
        abort();
    }
    return f;
}

/* MPI's own types are not needed: the arguments are passed on unread. */
int MPI_Init(int *argc, char ***argv)
{
    int (*init)(int *, char ***) = (int (*)(int *, char ***)) next("MPI_Init");
    int rc = init(argc, argv);
    start();
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided)
{
    int (*init)(int *, char ***, int, int *) =
        (int (*)(int *, char ***, int, int *)) next("MPI_Init_thread");
    int rc = init(argc, argv, required, provided);
    start();
    return rc;
}

__attribute__((destructor)) static void stop(void)
{
    fprintf(stderr, "interrupting: pid=%d signals=%ld\n", (int) getpid(), (long) signals);
}
