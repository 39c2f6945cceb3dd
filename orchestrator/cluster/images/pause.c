/* The pods' sandbox process (the local cluster's pause image): holds the pod's namespaces, reaps
 * the orphans it inherits as PID 1, and exits on SIGINT or SIGTERM. */
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { _exit(sig == SIGTERM ? 0 : 1); }

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction quit = {.sa_handler = stop}, child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    sigaction(SIGINT, &quit, NULL);
    sigaction(SIGTERM, &quit, NULL);
    sigaction(SIGCHLD, &child, NULL);
    for (;;)
        pause();
}
