/* The link model the delay line applies, as node/linkmodel.py defines it: a packet from `src` to the
 * node of queue `q` is held for the pair's one-way delay plus both ends' degradation, with uniform
 * jitter (the plan's plus both ends' added) that never reorders one direction, and dropped with the plan's loss combined with both
 * ends' (1 - (1 - base)(1 - a)(1 - b)). Also the small map and random numbers that needs. */
#include <stdlib.h>
#include <string.h>

#include "delayline.h"

struct model model = {.lock = PTHREAD_MUTEX_INITIALIZER};

static uint32_t slot_of(uint32_t key, uint32_t cap)
{
    key *= 0x9E3779B1u;
    return (key ^ (key >> 16)) & (cap - 1);
}

int64_t *u32map_find(const struct u32map *m, uint32_t key)
{
    if (!m->cap)
        return NULL;
    for (uint32_t i = slot_of(key, m->cap); m->used[i]; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key)
            return &m->vals[i];
    return NULL;
}

int u32map_put(struct u32map *m, uint32_t key, int64_t val)
{
    int64_t *found = u32map_find(m, key);
    if (found) {
        *found = val;
        return 0;
    }
    if ((m->len + 1) * 2 > m->cap) { /* at most half full */
        struct u32map bigger = {.cap = m->cap ? m->cap * 2 : 16};
        bigger.keys = calloc(bigger.cap, sizeof *bigger.keys);
        bigger.vals = calloc(bigger.cap, sizeof *bigger.vals);
        bigger.used = calloc(bigger.cap, 1);
        if (!bigger.keys || !bigger.vals || !bigger.used) {
            free(bigger.keys), free(bigger.vals), free(bigger.used);
            return -1;
        }
        for (uint32_t i = 0; i < m->cap; i++)
            if (m->used[i])
                u32map_put(&bigger, m->keys[i], m->vals[i]);
        free(m->keys), free(m->vals), free(m->used);
        *m = bigger;
    }
    uint32_t i = slot_of(key, m->cap);
    while (m->used[i])
        i = (i + 1) & (m->cap - 1);
    m->keys[i] = key, m->vals[i] = val, m->used[i] = 1;
    m->len++;
    return 0;
}

int model_node(const char *name)
{
    for (int i = 0; i < model.n_nodes; i++)
        if (!strcmp(model.names[i], name))
            return i;
    if (model.n_nodes == model.cap) {
        int cap = model.cap ? model.cap * 2 : 64;
        char **names = realloc(model.names, cap * sizeof *names);
        if (names)
            model.names = names;
        int64_t *added_ns = realloc(model.added_ns, cap * sizeof *added_ns);
        if (added_ns)
            model.added_ns = added_ns;
        int64_t *added_jitter_ns = realloc(model.added_jitter_ns, cap * sizeof *added_jitter_ns);
        if (added_jitter_ns)
            model.added_jitter_ns = added_jitter_ns;
        double *added_loss = realloc(model.added_loss, cap * sizeof *added_loss);
        if (added_loss)
            model.added_loss = added_loss;
        if (!names || !added_ns || !added_jitter_ns || !added_loss)
            return -1;
        model.cap = cap;
    }
    if (!(model.names[model.n_nodes] = strdup(name)))
        return -1;
    model.added_ns[model.n_nodes] = 0;
    model.added_jitter_ns[model.n_nodes] = 0;
    model.added_loss[model.n_nodes] = 0;
    return model.n_nodes++;
}

double rng_uniform(struct rng *r) /* splitmix64 */
{
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

/* Called with model.lock held. True: drop it. Else `*at` is its release time, 0 to accept it now. */
bool model_decide(struct queue *q, uint32_t src, int64_t now, struct rng *r, int64_t *at)
{
    int64_t *peer_of = u32map_find(&model.node_of_ip, src);
    int peer = peer_of ? (int)*peer_of : -1;
    double loss = model.loss;
    int64_t *planned = u32map_find(&q->delays, src);
    int64_t delay = planned ? *planned : 0, jitter = model.jitter_ns;
    if (peer >= 0) {
        loss = 1 - (1 - loss) * (1 - model.added_loss[q->node]) * (1 - model.added_loss[peer]);
        delay += model.added_ns[q->node] + model.added_ns[peer];
        jitter += model.added_jitter_ns[q->node] + model.added_jitter_ns[peer];
    }
    if (loss > 0 && rng_uniform(r) < loss)
        return true;
    int64_t *last = u32map_find(&q->last, src);
    if (!delay && !jitter && (!last || *last <= now)) {
        *at = 0;
        return false;
    }
    if (jitter) {
        delay += (int64_t)((2 * rng_uniform(r) - 1) * (double)jitter);
        if (delay < 0)
            delay = 0;
    }
    *at = now + delay;
    if (last && *last > *at)
        *at = *last;
    if (last)
        *last = *at;
    else
        (void)u32map_put(&q->last, src, *at); /* out of memory: only this direction's order is at risk */
    return false;
}
