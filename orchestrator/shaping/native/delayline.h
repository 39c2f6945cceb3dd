/* The native delay line's shared types: the link model (model.c), a namespace's queue socket
 * (nfq.c), the workers that hold and release packets (worker.c), and what the control thread
 * (delayline.c) owns. See delayline.c for the whole picture. */
#ifndef PEERLAB_DELAYLINE_H
#define PEERLAB_DELAYLINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QUEUE_NUM 0
#define QUEUE_MAXLEN 65536 /* packets held at once per namespace (a verdict frees a slot) */
#define COPY_BYTES 20      /* the IPv4 header: the source address is all we read */
#define LATE_BUCKETS 8     /* releases by lateness: <0.1, <0.5, <1, <2, <5, <10, <20, >=20 ms */
#define OWN_NETNS "/proc/self/ns/net"
#define ERR_LEN 512

/* uint32 -> int64 map (open addressing): addresses to delays, to last releases, to node ids */
struct u32map {
    uint32_t *keys;
    int64_t *vals;
    uint8_t *used;
    uint32_t cap, len;
};
int64_t *u32map_find(const struct u32map *m, uint32_t key);
int u32map_put(struct u32map *m, uint32_t key, int64_t val);

/* What `links` and `degrade` set, read by the workers under `lock`. Nodes are numbered as they are
 * first named (by links, attach or degrade). */
struct model {
    pthread_mutex_t lock;
    char **names;
    int64_t *added_ns;        /* a degraded node's added one-way delay, both directions */
    int64_t *added_jitter_ns; /* ... its added jitter */
    double *added_loss;       /* ... and its loss */
    int n_nodes, cap;
    struct u32map node_of_ip; /* IPv4 address (network order) -> node */
    int64_t jitter_ns;
    double loss;
};
extern struct model model;
int model_node(const char *name); /* the node's number, added if new; lock held */

struct rng {
    uint64_t state;
};
double rng_uniform(struct rng *r); /* [0, 1) */

/* A packet's fate, from the model: drop it, or release it at `at` (ns, CLOCK_MONOTONIC; 0: now) */
struct queue;
bool model_decide(struct queue *q, uint32_t src, int64_t now, struct rng *r, int64_t *at);

/* A packet the kernel still holds for one queue, in arrival order (the order of the kernel's list) */
enum { HELD, DUE, DONE };
struct slot {
    uint32_t id;
    uint8_t state;
};

struct due {
    uint64_t pos; /* in the queue's ring */
    int64_t at;
};

/* One node's namespace: its queue socket, and what only its worker touches */
struct queue {
    int fd;
    uint32_t portid;
    int node;
    char name[128];
    struct u32map delays; /* source address -> one-way delay (ns); set at attach, then read only */
    struct u32map last;   /* source address -> its last release: one direction is never reordered */
    struct slot *ring;
    uint64_t head, tail, ring_cap; /* absolute positions; ring_cap a power of two */
    struct due *due;               /* this release's packets */
    size_t n_due, due_cap;
    bool touched;
    bool broken;               /* its socket failed: an error was reported once */
    uint64_t packets, dropped; /* atomics: read by the control thread */
    struct queue *next;        /* the control thread's list of queues */
};

struct worker;
struct worker *worker_start(int index, uint64_t seed, char *err);
int worker_add(struct worker *w, struct queue *q, char *err);
uint64_t worker_held(const struct worker *w);
void worker_late(const struct worker *w, uint64_t late[LATE_BUCKETS]);

/* nfq.c: the netlink side */
int nfq_open_queue(struct queue *q, uint16_t queue_num, char *err);
int nfq_probe(char *err);
size_t nfq_put_verdict(char *buf, uint16_t queue_num, uint32_t id, int verdict, bool batch);
int nfq_send(int fd, const char *buf, size_t len);

/* errors of broken queues, for `stats` (delayline.c) */
void report_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
