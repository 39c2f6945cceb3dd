/* A worker: one thread per core, owning the queues handed to it. Its epoll waits on their sockets and
 * on one timerfd armed for its earliest held packet. It reads packet messages in batches, asks the
 * link model for each packet's fate, and keeps the held ones in a min-heap by release time. Whenever
 * packets fall due it releases all of them, with one sendmsg per queue: a single batch verdict when
 * they are the oldest the kernel holds for that queue (the usual case: one source, one delay), else
 * one verdict message each, all in one buffer. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "delayline.h"

#define BATCH 64              /* packet messages per recvmmsg */
#define MSG_BUF 2048          /* one packet message: headers, attributes, 20 bytes of packet */
#define ROUNDS 16             /* batches read from one queue before the others (and due packets) get a turn */
#define OUT_BUF (64 << 10)    /* verdicts per sendmsg: below the socket's send buffer */
#define VERDICT_MAX 64        /* one verdict message fits in this */

struct held {
    int64_t at;
    uint64_t seq; /* ties in arrival order */
    struct queue *q;
    uint64_t pos;
};

struct worker {
    pthread_t thread;
    int epfd, tfd;
    struct rng rng;
    struct held *heap;
    size_t n_heap, heap_cap;
    uint64_t seq;
    int64_t armed; /* the timer's expiry, -1 when it has fired */
    struct queue **touched;
    size_t n_touched, touched_cap;
    uint64_t held, late[LATE_BUCKETS]; /* atomics: read by the control thread */
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    char (*in)[MSG_BUF];
    char *out;
    size_t out_len;
};

static const int64_t late_edges_ns[LATE_BUCKETS - 1] = {100000, 500000, 1000000, 2000000, 5000000, 10000000,
                                                        20000000};

static void *grow(void *p, size_t *cap, size_t size, size_t first)
{
    *cap = *cap ? *cap * 2 : first;
    if (!(p = realloc(p, *cap * size))) {
        fputs("delay line: out of memory\n", stderr);
        abort(); /* fail-closed: the queues' packets stop */
    }
    return p;
}

static int64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static bool before(const struct held *a, const struct held *b)
{
    return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void heap_push(struct worker *w, struct held h)
{
    if (w->n_heap == w->heap_cap)
        w->heap = grow(w->heap, &w->heap_cap, sizeof *w->heap, 4096);
    size_t i = w->n_heap++;
    for (size_t up; i && before(&h, &w->heap[up = (i - 1) / 2]); i = up)
        w->heap[i] = w->heap[up];
    w->heap[i] = h;
}

static struct held heap_pop(struct worker *w)
{
    struct held top = w->heap[0], last = w->heap[--w->n_heap];
    size_t i = 0, n = w->n_heap;
    for (size_t c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && before(&w->heap[c + 1], &w->heap[c]))
            c++;
        if (!before(&w->heap[c], &last))
            break;
        w->heap[i] = w->heap[c];
    }
    if (n)
        w->heap[i] = last;
    return top;
}

/* The queue's ring mirrors the kernel's list of packets it holds for the queue, in arrival order. */
static uint64_t ring_push(struct queue *q, uint32_t id)
{
    if (q->tail - q->head == q->ring_cap) {
        size_t old = q->ring_cap, cap = old;
        struct slot *ring = grow(NULL, &cap, sizeof *ring, 1024);
        for (uint64_t pos = q->head; pos < q->tail; pos++)
            ring[pos & (cap - 1)] = q->ring[pos & (old - 1)];
        free(q->ring);
        q->ring = ring, q->ring_cap = cap;
    }
    q->ring[q->tail & (q->ring_cap - 1)] = (struct slot){.id = id, .state = HELD};
    return q->tail++;
}

static struct slot *slot_at(struct queue *q, uint64_t pos)
{
    return &q->ring[pos & (q->ring_cap - 1)];
}

static void flush(struct worker *w, struct queue *q)
{
    if (w->out_len && nfq_send(q->fd, w->out, w->out_len) < 0 && !q->broken) {
        q->broken = true;
        report_error("%s: sending verdicts: %s", q->name, strerror(errno));
    }
    w->out_len = 0;
}

static void put(struct worker *w, struct queue *q, uint32_t id, int verdict, bool batch)
{
    if (w->out_len + VERDICT_MAX > OUT_BUF)
        flush(w, q);
    w->out_len += nfq_put_verdict(w->out + w->out_len, QUEUE_NUM, id, verdict, batch);
}

/* One packet message (or another message: an error answering a verdict for a packet already gone). */
static void take(struct worker *w, struct queue *q, const char *buf, int len, int64_t now)
{
    for (const struct nlmsghdr *nlh = (const void *)buf; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
        struct nlattr *attr[NFQA_MAX + 1] = {0};
        if (NFNL_SUBSYS_ID(nlh->nlmsg_type) != NFNL_SUBSYS_QUEUE || NFNL_MSG_TYPE(nlh->nlmsg_type) != NFQNL_MSG_PACKET ||
            nfq_nlmsg_parse(nlh, attr) < 0 || !attr[NFQA_PACKET_HDR])
            continue;
        const struct nfqnl_msg_packet_hdr *ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
        uint32_t id = ntohl(ph->packet_id), src;
        const uint8_t *ip = attr[NFQA_PAYLOAD] ? mnl_attr_get_payload(attr[NFQA_PAYLOAD]) : NULL;
        int64_t at = 0;
        __atomic_fetch_add(&q->packets, 1, __ATOMIC_RELAXED);
        if (ip && mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]) >= COPY_BYTES && ip[0] >> 4 == 4) {
            memcpy(&src, ip + 12, sizeof src);
            if (model_decide(q, src, now, &w->rng, &at)) {
                __atomic_fetch_add(&q->dropped, 1, __ATOMIC_RELAXED);
                put(w, q, id, NF_DROP, false);
                continue;
            }
        }
        if (!at) {
            put(w, q, id, NF_ACCEPT, false);
            continue;
        }
        heap_push(w, (struct held){.at = at, .seq = w->seq++, .q = q, .pos = ring_push(q, id)});
    }
}

static void read_queue(struct worker *w, struct queue *q)
{
    for (int round = 0; round < ROUNDS; round++) {
        int n = recvmmsg(q->fd, w->msgs, BATCH, MSG_DONTWAIT, NULL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n < 0 && errno != ENOBUFS) {
            report_error("%s: reading its queue: %s", q->name, strerror(errno));
            epoll_ctl(w->epfd, EPOLL_CTL_DEL, q->fd, NULL); /* the socket stays open: its number is not reused */
            q->broken = true;
            return;
        }
        if (n <= 0)
            continue;
        int64_t now = now_ns();
        pthread_mutex_lock(&model.lock);
        for (int i = 0; i < n; i++)
            take(w, q, w->in[i], (int)w->msgs[i].msg_len, now);
        pthread_mutex_unlock(&model.lock);
        flush(w, q); /* drops and undelayed packets: before any batch verdict that could cover their ids */
        if (n < BATCH)
            return;
    }
}

/* Release one queue's due packets: one batch verdict if they are exactly the oldest the kernel
 * holds for it (everything up to the newest of them), else a verdict each; one sendmsg either way. */
static void send_due(struct worker *w, struct queue *q)
{
    size_t n = 0;
    uint32_t newest = 0;
    uint64_t counts[LATE_BUCKETS] = {0};
    for (uint64_t pos = q->head; pos < q->tail && n < q->n_due; pos++) {
        struct slot *s = slot_at(q, pos);
        if (s->state == HELD)
            break;
        if (s->state == DUE)
            n++, newest = s->id;
    }
    if (n == q->n_due)
        put(w, q, newest, NF_ACCEPT, true);
    else
        for (size_t i = 0; i < q->n_due; i++)
            put(w, q, slot_at(q, q->due[i].pos)->id, NF_ACCEPT, false);
    int64_t now = now_ns();
    flush(w, q);
    for (size_t i = 0; i < q->n_due; i++) {
        int64_t late = now - q->due[i].at;
        int b = 0;
        while (b < LATE_BUCKETS - 1 && late >= late_edges_ns[b])
            b++;
        counts[b]++;
        slot_at(q, q->due[i].pos)->state = DONE;
    }
    for (int b = 0; b < LATE_BUCKETS; b++)
        if (counts[b])
            __atomic_fetch_add(&w->late[b], counts[b], __ATOMIC_RELAXED);
    while (q->head < q->tail && slot_at(q, q->head)->state == DONE)
        q->head++;
    q->n_due = 0;
    q->touched = false;
}

static void release(struct worker *w)
{
    int64_t now = now_ns();
    while (w->n_heap && w->heap[0].at <= now) {
        struct held h = heap_pop(w);
        struct queue *q = h.q;
        slot_at(q, h.pos)->state = DUE;
        if (q->n_due == q->due_cap)
            q->due = grow(q->due, &q->due_cap, sizeof *q->due, 1024);
        q->due[q->n_due++] = (struct due){.pos = h.pos, .at = h.at};
        if (!q->touched) {
            if (w->n_touched == w->touched_cap)
                w->touched = grow(w->touched, &w->touched_cap, sizeof *w->touched, 16);
            w->touched[w->n_touched++] = q;
            q->touched = true;
        }
    }
    for (size_t i = 0; i < w->n_touched; i++)
        send_due(w, w->touched[i]);
    w->n_touched = 0;
    __atomic_store_n(&w->held, w->n_heap, __ATOMIC_RELAXED);
}

static void arm(struct worker *w)
{
    if (!w->n_heap || w->heap[0].at == w->armed)
        return;
    int64_t at = w->heap[0].at;
    struct itimerspec t = {.it_value = {.tv_sec = at / 1000000000, .tv_nsec = at % 1000000000}};
    timerfd_settime(w->tfd, TFD_TIMER_ABSTIME, &t, NULL);
    w->armed = at;
}

static void *run(void *arg)
{
    struct worker *w = arg;
    struct epoll_event events[16];
    uint64_t expirations;
    for (;;) {
        int n = epoll_wait(w->epfd, events, 16, -1);
        for (int i = 0; i < n; i++) {
            if (!events[i].data.ptr) {
                if (read(w->tfd, &expirations, sizeof expirations) > 0)
                    w->armed = -1;
            } else {
                read_queue(w, events[i].data.ptr);
            }
            release(w);
        }
        arm(w);
    }
    return NULL;
}

struct worker *worker_start(int index, uint64_t seed, char *err)
{
    struct worker *w = calloc(1, sizeof *w);
    struct epoll_event timer = {.events = EPOLLIN, .data.ptr = NULL};
    if (!w || !(w->in = calloc(BATCH, MSG_BUF)) || !(w->out = malloc(OUT_BUF))) {
        snprintf(err, ERR_LEN, "out of memory");
        return NULL;
    }
    w->rng.state = seed * 0x9E3779B97F4A7C15ull + (uint64_t)index;
    w->armed = -1;
    for (int i = 0; i < BATCH; i++) {
        w->iov[i] = (struct iovec){.iov_base = w->in[i], .iov_len = MSG_BUF};
        w->msgs[i].msg_hdr = (struct msghdr){.msg_iov = &w->iov[i], .msg_iovlen = 1};
    }
    if ((w->epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
        (w->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) < 0 ||
        epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->tfd, &timer) < 0) {
        snprintf(err, ERR_LEN, "worker %d: %s", index, strerror(errno));
        return NULL;
    }
    int e = pthread_create(&w->thread, NULL, run, w);
    if (e) {
        snprintf(err, ERR_LEN, "worker %d: %s", index, strerror(e));
        return NULL;
    }
    return w;
}

/* Hand a bound queue to the worker: from here on only the worker touches its packets. */
int worker_add(struct worker *w, struct queue *q, char *err)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = q};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, q->fd, &ev) < 0) {
        snprintf(err, ERR_LEN, "epoll: %s", strerror(errno));
        return -1;
    }
    return 0;
}

uint64_t worker_held(const struct worker *w)
{
    return __atomic_load_n(&w->held, __ATOMIC_RELAXED);
}

void worker_late(const struct worker *w, uint64_t late[LATE_BUCKETS])
{
    for (int b = 0; b < LATE_BUCKETS; b++)
        late[b] += __atomic_load_n(&w->late[b], __ATOMIC_RELAXED);
}
