/* peerlab's delay line: per-pair latency, jitter and loss for kernels without sch_netem, applied to
 * every IPv4 packet a node receives, in user space through NFQUEUE (orchestrator/shaping/delayline.py
 * starts it and speaks its protocol; docs/shaping.md says why at the receiver).
 *
 * This file owns the control thread: the JSON-lines protocol on stdin/stdout (attach, links,
 * degrade, stats; it exits when stdin closes), attaching a namespace (enter it, bind its queue 0,
 * add `iptables -t mangle -A PREROUTING -i IFNAME -j NFQUEUE --queue-num 0` there, come back, hand
 * the queue to a worker, round robin), the statistics, and the process: one worker per core
 * (worker.c), real-time priority, `--probe`. The link model is model.c; the netlink side nfq.c.
 *
 * It removes nothing when it exits: the queue sockets close with it, and the kernel then drops what
 * the rules send to queue 0 (fail-closed); the rules go away with their namespaces. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "delayline.h"

#define REALTIME_PRIORITY 10
#define MAX_WORKERS 64

extern char **environ;

static struct worker *workers[MAX_WORKERS];
static int n_workers, next_worker;
static struct queue *queues;
static int own_netns = -1;
static pthread_mutex_t errors_lock = PTHREAD_MUTEX_INITIALIZER;
static json_t *errors;

void report_error(const char *fmt, ...)
{
    char text[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&errors_lock);
    json_array_append_new(errors, json_string(text));
    pthread_mutex_unlock(&errors_lock);
}

static json_t *failed(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *failed(const char *fmt, ...)
{
    char text[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    return json_pack("{ss}", "error", text);
}

/* The rule, run in a child: it inherits this thread's network namespace (not its real-time policy). */
static int add_rule(const char *ifname, char *err)
{
    char *argv[] = {"iptables", "-w", "-t", "mangle", "-A", "PREROUTING", "-i", (char *)ifname, "-j", "NFQUEUE",
                    "--queue-num", "0", NULL};
    char out[ERR_LEN / 2], chunk[512];
    size_t len = 0;
    ssize_t got;
    int pipefd[2], status = 0, e;
    pid_t pid;
    posix_spawn_file_actions_t files;
    posix_spawnattr_t attr;
    struct sched_param normal = {.sched_priority = 0};
    if (pipe2(pipefd, O_CLOEXEC) < 0) {
        snprintf(err, ERR_LEN, "pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&files, pipefd[1], 1);
    posix_spawn_file_actions_adddup2(&files, pipefd[1], 2);
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSCHEDULER);
    posix_spawnattr_setschedpolicy(&attr, SCHED_OTHER);
    posix_spawnattr_setschedparam(&attr, &normal);
    e = posix_spawnp(&pid, "iptables", &files, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&files);
    posix_spawnattr_destroy(&attr);
    close(pipefd[1]);
    if (e) {
        close(pipefd[0]);
        snprintf(err, ERR_LEN, "iptables: %s", strerror(e));
        return -1;
    }
    while ((got = read(pipefd[0], chunk, sizeof chunk)) != 0) { /* all of it: a full pipe would block the child */
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            break;
        size_t keep = (size_t)got < sizeof out - 1 - len ? (size_t)got : sizeof out - 1 - len;
        memcpy(out + len, chunk, keep);
        len += keep;
    }
    out[len] = 0;
    close(pipefd[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    while (len && (out[len - 1] == '\n' || out[len - 1] == ' '))
        out[--len] = 0;
    snprintf(err, ERR_LEN, "iptables -t mangle -A PREROUTING -i %s -j NFQUEUE: %s", ifname,
             len ? out : "failed");
    return -1;
}

static int parse_delays(struct queue *q, json_t *delays, char *err)
{
    const char *ip;
    json_t *ms;
    struct in_addr addr;
    json_object_foreach(delays, ip, ms) {
        if (inet_pton(AF_INET, ip, &addr) != 1 || !json_is_number(ms)) {
            snprintf(err, ERR_LEN, "delays_ms: %s is not an IPv4 address with a number", ip);
            return -1;
        }
        if (u32map_put(&q->delays, addr.s_addr, (int64_t)(json_number_value(ms) * 1e6)) < 0) {
            snprintf(err, ERR_LEN, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* Bind the namespace's queue, then add the rule that feeds it (nothing passes unqueued). */
static json_t *attach(json_t *msg)
{
    const char *netns = json_string_value(json_object_get(msg, "netns"));
    const char *node = json_string_value(json_object_get(msg, "node"));
    const char *ifname = json_string_value(json_object_get(msg, "ifname"));
    char err[ERR_LEN], path[PATH_MAX];
    bool enter, ok;
    int fd = -1;
    if (!netns || !node)
        return failed("attach needs netns and node");
    ifname = ifname ? ifname : "eth0";
    struct queue *q = calloc(1, sizeof *q);
    if (!q)
        return failed("out of memory");
    snprintf(q->name, sizeof q->name, "%s", node);
    if (parse_delays(q, json_object_get(msg, "delays_ms"), err) < 0) {
        free(q);
        return failed("delay line for %s: %s", node, err);
    }
    enter = strcmp(netns, OWN_NETNS) != 0; /* a pod's shaper has no CAP_SYS_ADMIN, and needs no setns */
    if (enter) {
        snprintf(path, sizeof path, netns[0] == '/' ? "%s" : "/var/run/netns/%s", netns);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || setns(fd, CLONE_NEWNET) < 0) {
            int e = errno;
            if (fd >= 0)
                close(fd);
            free(q);
            return failed("delay line for %s: network namespace %s: %s", node, path, strerror(e));
        }
        close(fd);
    }
    ok = nfq_open_queue(q, QUEUE_NUM, err) == 0 && add_rule(ifname, err) == 0;
    if (enter && setns(own_netns, CLONE_NEWNET) < 0) {
        fprintf(stderr, "delay line: cannot return to its own network namespace: %s\n", strerror(errno));
        exit(1);
    }
    if (!ok) {
        if (q->fd >= 0)
            close(q->fd);
        free(q);
        return failed("delay line for %s: %s", node, err);
    }
    pthread_mutex_lock(&model.lock);
    q->node = model_node(node);
    pthread_mutex_unlock(&model.lock);
    if (q->node < 0 || worker_add(workers[next_worker++ % n_workers], q, err) < 0) {
        fprintf(stderr, "delay line: %s: cannot hand its queue to a worker\n", node);
        exit(1); /* the rule is in: its packets would stop */
    }
    q->next = queues;
    queues = q;
    return json_pack("{ss}", "ok", node);
}

static json_t *links(json_t *msg)
{
    json_t *ips = json_object_get(msg, "ips"), *addr;
    const char *node;
    struct in_addr in;
    if (!json_is_object(ips))
        return failed("links needs ips");
    pthread_mutex_lock(&model.lock);
    json_object_foreach(ips, node, addr) {
        int id = model_node(node);
        if (json_is_string(addr) && inet_pton(AF_INET, json_string_value(addr), &in) == 1 && id >= 0)
            u32map_put(&model.node_of_ip, in.s_addr, id);
    }
    model.jitter_ns = (int64_t)(json_number_value(json_object_get(msg, "jitter_ms")) * 1e6);
    model.loss = json_number_value(json_object_get(msg, "loss"));
    pthread_mutex_unlock(&model.lock);
    return json_pack("{ss}", "ok", "links");
}

static json_t *degrade(json_t *msg)
{
    const char *node = json_string_value(json_object_get(msg, "node"));
    if (!node)
        return failed("degrade needs node");
    pthread_mutex_lock(&model.lock);
    int id = model_node(node);
    if (id >= 0) {
        model.added_ns[id] = (int64_t)(json_number_value(json_object_get(msg, "delay_ms")) * 1e6);
        model.added_jitter_ns[id] = (int64_t)(json_number_value(json_object_get(msg, "jitter_ms")) * 1e6);
        model.added_loss[id] = json_number_value(json_object_get(msg, "loss"));
    }
    pthread_mutex_unlock(&model.lock);
    return id >= 0 ? json_pack("{ss}", "ok", "degrade") : failed("out of memory");
}

static json_t *stats(void)
{
    static const char *edges[LATE_BUCKETS] = {"<0.1", "<0.5", "<1", "<2", "<5", "<10", "<20", ">=20"};
    json_t *packets = json_object(), *dropped = json_object(), *late_ms = json_object(), *errs;
    uint64_t held = 0, late[LATE_BUCKETS] = {0};
    for (struct queue *q = queues; q; q = q->next) {
        json_int_t p = json_integer_value(json_object_get(packets, q->name));
        json_int_t d = json_integer_value(json_object_get(dropped, q->name));
        json_object_set_new(packets, q->name, json_integer(p + __atomic_load_n(&q->packets, __ATOMIC_RELAXED)));
        json_object_set_new(dropped, q->name, json_integer(d + __atomic_load_n(&q->dropped, __ATOMIC_RELAXED)));
    }
    for (int i = 0; i < n_workers; i++) {
        held += worker_held(workers[i]);
        worker_late(workers[i], late);
    }
    for (int b = 0; b < LATE_BUCKETS; b++)
        json_object_set_new(late_ms, edges[b], json_integer(late[b]));
    pthread_mutex_lock(&errors_lock);
    errs = json_deep_copy(errors);
    pthread_mutex_unlock(&errors_lock);
    return json_pack("{ss so so sI so so}", "ok", "stats", "packets", packets, "dropped", dropped, "held",
                     (json_int_t)held, "errors", errs, "late_ms", late_ms);
}

static json_t *handle(json_t *msg)
{
    const char *op = json_string_value(json_object_get(msg, "op"));
    if (!op)
        return failed("unknown op None");
    if (!strcmp(op, "attach"))
        return attach(msg);
    if (!strcmp(op, "links"))
        return links(msg);
    if (!strcmp(op, "degrade"))
        return degrade(msg);
    if (!strcmp(op, "stats"))
        return stats();
    return failed("unknown op '%s'", op);
}

static bool in_path(const char *name)
{
    const char *path = getenv("PATH");
    char dirs[4096], file[PATH_MAX];
    snprintf(dirs, sizeof dirs, "%s", path && *path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
    for (char *save, *dir = strtok_r(dirs, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
        snprintf(file, sizeof file, "%s/%s", dir, name);
        if (access(file, X_OK) == 0)
            return true;
    }
    return false;
}

static int probe(void)
{
    char err[ERR_LEN];
    if (!in_path("iptables")) {
        puts("iptables is not installed (apt-get install iptables)");
        return 1;
    }
    if (nfq_probe(err) < 0) {
        puts(err);
        return 1;
    }
    puts("NFQUEUE works (iptables and nfnetlink_queue)");
    return 0;
}

static int usage(FILE *to, int code)
{
    fputs("usage: peerlab-delayline [--seed N] [--probe]\n"
          "Holds every IPv4 packet a node receives for its pair's latency (NFQUEUE); reads JSON lines on stdin.\n"
          "  --seed N   jitter and loss draws\n"
          "  --probe    say whether NFQUEUE works here (exit 0) or why not (exit 1)\n",
          to);
    return code;
}

int main(int argc, char **argv)
{
    uint64_t seed = 0;
    char err[ERR_LEN], *line = NULL;
    size_t cap = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--probe"))
            return probe();
        if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else
            return usage(strcmp(argv[i], "--help") ? stderr : stdout, strcmp(argv[i], "--help") ? 2 : 0);
    }
    signal(SIGPIPE, SIG_IGN);
    errors = json_array();
    if ((own_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
        fprintf(stderr, "delay line: /proc/self/ns/net: %s\n", strerror(errno));
        return 1;
    }
    /* netem's timers run in softirq, ahead of every process; the nearest user-space equivalent is a
     * real-time priority, so that busy nodes on few cores do not hold packets past their time.
     * Set before the workers start: they inherit it. */
    struct sched_param rt = {.sched_priority = REALTIME_PRIORITY};
    if (sched_setscheduler(0, SCHED_FIFO, &rt) < 0)
        fprintf(stderr, "delay line: no real-time priority (%s); packets may leave late on a busy machine\n",
                strerror(errno));
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* without it (no real-time), timers may fire 50 us late */
    cpu_set_t cpus;
    n_workers = sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    n_workers = n_workers < 1 ? 1 : n_workers > MAX_WORKERS ? MAX_WORKERS : n_workers;
    for (int i = 0; i < n_workers; i++)
        if (!(workers[i] = worker_start(i, seed, err))) {
            fprintf(stderr, "delay line: %s\n", err);
            return 1;
        }
    while (getline(&line, &cap, stdin) >= 0) {
        json_error_t jerr;
        json_t *msg, *answer;
        if (!line[strspn(line, " \t\r\n")])
            continue;
        msg = json_loads(line, 0, &jerr);
        answer = json_is_object(msg) ? handle(msg) : failed("not a JSON object: %s", msg ? line : jerr.text);
        char *text = json_dumps(answer, JSON_COMPACT);
        if (!text || printf("%s\n", text) < 0 || fflush(stdout) != 0)
            return 1;
        free(text);
        json_decref(answer);
        json_decref(msg);
    }
    return 0;
}
