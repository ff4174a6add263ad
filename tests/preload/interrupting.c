/*
 * Preloaded into a test's ranks (LD_PRELOAD): from before main until the
 * process exits, a timer raises SIGALRM every INTERRUPTING_US microseconds
 * (default 100), caught by a handler installed without SA_RESTART, so that
 * any blocking system call of the process (Open MPI's, ipmc's and its
 * threads', the program's) may return EINTR, as in a program that profiles
 * itself with a timer or takes SIGALRM for its own ends.
 *
 * A POSIX timer (timer_create), not setitimer: it is deleted at exec, so a
 * wrapper such as env(1) that loads this library first does not pass an
 * armed timer to a program that has not yet caught the signal.
 *
 * At exit it prints "interrupting: pid=P signals=N" to stderr, so that a
 * test can tell that the signals came.
 */
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

__attribute__((constructor)) static void start(void)
{
    struct sigaction sa;
    struct sigevent ev;
    struct itimerspec every;
    timer_t timer;
    const char *us = getenv("INTERRUPTING_US");
    long period_us = us ? atol(us) : 100;

    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, NULL) != 0) {
        perror("interrupting: sigaction");
        abort();
    }
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo = SIGALRM;
    if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0) {
        perror("interrupting: timer_create");
        abort();
    }
    every.it_interval.tv_sec = period_us / 1000000;
    every.it_interval.tv_nsec = period_us % 1000000 * 1000;
    every.it_value = every.it_interval;
    if (timer_settime(timer, 0, &every, NULL) != 0) {
        perror("interrupting: timer_settime");
        abort();
    }
}

__attribute__((destructor)) static void stop(void)
{
    fprintf(stderr, "interrupting: pid=%d signals=%ld\n", (int) getpid(), (long) signals);
}
