// SPDX-License-Identifier: GPL-2.0
/*
 * peerlab_cubic: Linux's cubic congestion control with its clocks running k times slower, for the
 * network namespaces of a dilated run (docs/dilation.md). A dilated run's links are k times slower in
 * real time, so every delay TCP measures is k times longer; the kernel's cubic compares them with
 * constants in real time (HyStart's 4-16 ms delay threshold, its 2 ms ACK spacing, a curve over real
 * seconds) and so behaves in experiment time as it would not undilated: at k = 11.5 HyStart ended
 * slow start at 36 segments on the queue slow start itself builds (docs/simulation.md, finding 14).
 * Here every time cubic reads (RTT samples, the clock, the idle gap) is divided by k first; the rest
 * is cubic's algorithm with Linux's constants (beta 717/1024, C = 0.4, fast convergence, TCP
 * friendliness, HyStart's ACK-train and delay tests, 8 samples, low window 16).
 *
 * k is the namespace's own: a dilated run sets net.ipv4.tcp_rto_min_us to k x 200 ms in every node's
 * namespace (orchestrator/shaping/tcp_settings.py), and a socket reads it when it starts, so
 * k = tcp_rto_min_us / 200000 (1 in a namespace that was not dilated: plain cubic).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char _license[] SEC("license") = "GPL";

#define RTO_MIN_US 200000ULL   /* Linux's TCP_RTO_MIN: a namespace's k is its minimum RTO over this */
#define K_ONE 1000ULL          /* k in thousandths */

#define BETA_SCALE 1024U
#define BETA 717U              /* the window after a loss: 717/1024 of the window before */
#define CURVE_HZ 10            /* the curve's time in 1/1024 s */
#define C_SCALED 410U          /* C = 0.4 as 41 * 10 (bic_scale * 10) */
#define HYSTART_LOW_WINDOW 16U
#define HYSTART_ACK_SPACING_US 2000U
#define HYSTART_SAMPLES 8
#define HYSTART_DELAY_MIN_US 4000U
#define HYSTART_DELAY_MAX_US 16000U

extern unsigned int CONFIG_HZ __kconfig;
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;
extern void tcp_cong_avoid_ai(struct tcp_sock *tp, __u32 w, __u32 acked) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;

/* a connection's state, in the socket's private congestion-control area (at most 104 bytes) */
struct dilated_cubic {
	__u32 cnt;              /* ACKs for one more segment of window */
	__u32 last_max_cwnd;    /* the window before the last loss (fast convergence lowers it) */
	__u32 last_cwnd;
	__u32 last_time;        /* virtual jiffies of the last curve update */
	__u32 origin_point;     /* the curve's plateau */
	__u32 curve_k;          /* time from the epoch's start to the plateau, 1/1024 s */
	__u32 delay_min;        /* least RTT seen, virtual us */
	__u32 epoch_start;      /* virtual jiffies; 0: no epoch */
	__u32 ack_cnt;
	__u32 tcp_cwnd;         /* what Reno's window would be (TCP friendliness) */
	__u8 sample_cnt;
	__u8 found;             /* HyStart found slow start's end */
	__u32 round_start;      /* virtual us */
	__u32 end_seq;
	__u32 last_ack;         /* virtual us */
	__u32 curr_rtt;         /* this round's least RTT, virtual us */
	__u32 k_milli;          /* this socket's k, thousandths */
};

static __always_inline struct dilated_cubic *state(struct sock *sk)
{
	return (struct dilated_cubic *)((struct inet_connection_sock *)sk)->icsk_ca_priv;
}

static __always_inline struct tcp_sock *tcp(struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline __u32 cwnd(struct tcp_sock *tp) { return tp->snd_cwnd; }

static __always_inline int in_slow_start(struct tcp_sock *tp) { return tp->snd_cwnd < tp->snd_ssthresh; }

static __always_inline int cwnd_limited(struct tcp_sock *tp)
{
	if (tp->is_cwnd_limited)
		return 1;
	if (in_slow_start(tp))
		return tp->snd_cwnd < 2 * tp->max_packets_out;
	return 0;
}

static __always_inline int after(__u32 a, __u32 b) { return (__s32)(b - a) < 0; }

/* experiment time: real time over k */
static __always_inline __u32 virtual_us(struct dilated_cubic *ca, __u64 real_us)
{
	return (__u32)(real_us * K_ONE / ca->k_milli);
}

static __always_inline __u32 clock_us(struct sock *sk, struct dilated_cubic *ca)
{
	return virtual_us(ca, tcp(sk)->tcp_mstamp);
}

static __always_inline __u32 virtual_jiffies(struct dilated_cubic *ca)
{
	return (__u32)(bpf_ktime_get_ns() / 1000 * K_ONE / ca->k_milli * CONFIG_HZ / 1000000);
}

static __always_inline void reset(struct dilated_cubic *ca)
{
	__u32 k_milli = ca->k_milli;

	__builtin_memset(ca, 0, sizeof(*ca));
	ca->k_milli = k_milli;
}

static __always_inline void hystart_reset(struct sock *sk, struct dilated_cubic *ca)
{
	ca->round_start = ca->last_ack = clock_us(sk, ca);
	ca->end_seq = tcp(sk)->snd_nxt;
	ca->curr_rtt = ~0U;
	ca->sample_cnt = 0;
}

SEC("struct_ops")
void BPF_PROG(dc_init, struct sock *sk)
{
	struct dilated_cubic *ca = state(sk);
	__u64 rto_min = sk->__sk_common.skc_net.net->ipv4.sysctl_tcp_rto_min_us;
	__u64 k_milli = rto_min * K_ONE / RTO_MIN_US;

	ca->k_milli = k_milli < K_ONE ? K_ONE : (__u32)k_milli;
	reset(ca);
	hystart_reset(sk, ca);
}

SEC("struct_ops")
void BPF_PROG(dc_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	struct dilated_cubic *ca = state(sk);
	struct tcp_sock *tp = tcp(sk);
	__u32 now, idle;

	if (event != CA_EVENT_TX_START || !ca->epoch_start)
		return;
	/* sending again after idle: the curve does not grow over the idle gap */
	now = virtual_jiffies(ca);
	idle = (__u32)((__u64)((__u32)bpf_jiffies64() - tp->lsndtime) * K_ONE / ca->k_milli);
	if ((__s32)idle > 0) {
		ca->epoch_start += idle;
		if (after(ca->epoch_start, now))
			ca->epoch_start = now;
	}
}

/* floor of the cube root of a (a < 2^64): bit by bit, 22 bits suffice */
static __always_inline __u32 cube_root(__u64 a)
{
	__u64 root = 0;
	int bit;

	for (bit = 21; bit >= 0; bit--) {
		__u64 trial = root | (1ULL << bit);

		if (trial * trial * trial <= a)
			root = trial;
	}
	return (__u32)root;
}

static __always_inline void update(struct dilated_cubic *ca, __u32 cwnd, __u32 acked)
{
	__u32 now = virtual_jiffies(ca), hz = CONFIG_HZ;
	__u64 offs, t, delta, target;
	__u32 max_cnt, d;

	ca->ack_cnt += acked;
	if (ca->last_cwnd == cwnd && (__s32)(now - ca->last_time) <= (__s32)(hz / 32))
		return;
	if (!(ca->epoch_start && now == ca->last_time)) {
		ca->last_cwnd = cwnd;
		ca->last_time = now;
		if (ca->epoch_start == 0) {
			ca->epoch_start = now;
			ca->ack_cnt = acked;
			ca->tcp_cwnd = cwnd;
			if (ca->last_max_cwnd <= cwnd) {
				ca->curve_k = 0;
				ca->origin_point = cwnd;
			} else {
				/* K = cbrt((Wmax - W) / C), in 1/1024 s */
				ca->curve_k = cube_root(((1ULL << (10 + 3 * CURVE_HZ)) / C_SCALED) *
							(ca->last_max_cwnd - cwnd));
				ca->origin_point = ca->last_max_cwnd;
			}
		}
		/* the curve's time one RTT ahead: (now - epoch + delay_min) in 1/1024 s */
		t = (__u64)(__s32)(now - ca->epoch_start) * 1000000 / hz + ca->delay_min;
		t = (t << CURVE_HZ) / 1000000;
		offs = t < ca->curve_k ? ca->curve_k - t : t - ca->curve_k;
		delta = (C_SCALED * offs * offs * offs) >> (10 + 3 * CURVE_HZ);
		target = t < ca->curve_k ? ca->origin_point - delta : ca->origin_point + delta;
		if (target > cwnd)
			ca->cnt = cwnd / (__u32)(target - cwnd);
		else
			ca->cnt = 100 * cwnd;
		if (ca->last_max_cwnd == 0 && ca->cnt > 20)
			ca->cnt = 20;  /* the first epoch grows at least 5% a round trip */
	}
	/* TCP friendliness: at least as fast as Reno would grow with the same beta */
	d = (cwnd * (8 * (BETA_SCALE + BETA) / 3 / (BETA_SCALE - BETA))) >> 3;
	if (d && ca->ack_cnt > d) {
		ca->tcp_cwnd += (ca->ack_cnt - 1) / d;
		ca->ack_cnt = (ca->ack_cnt - 1) % d + 1;
	}
	if (ca->tcp_cwnd > cwnd) {
		max_cnt = cwnd / (ca->tcp_cwnd - cwnd);
		if (ca->cnt > max_cnt)
			ca->cnt = max_cnt;
	}
	if (ca->cnt < 2)
		ca->cnt = 2;
}

SEC("struct_ops")
void BPF_PROG(dc_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp(sk);
	struct dilated_cubic *ca = state(sk);

	if (!cwnd_limited(tp))
		return;
	if (in_slow_start(tp)) {
		/* slow start: one segment per segment acknowledged, up to the threshold */
		acked = tcp_slow_start(tp, acked);
		if (!acked)
			return;
	}
	update(ca, cwnd(tp), acked);
	tcp_cong_avoid_ai(tp, ca->cnt, acked);
}

SEC("struct_ops")
__u32 BPF_PROG(dc_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp(sk);
	struct dilated_cubic *ca = state(sk);
	__u32 w = tp->snd_cwnd, next;

	ca->epoch_start = 0;
	if (w < ca->last_max_cwnd)
		ca->last_max_cwnd = (w * (BETA_SCALE + BETA)) / (2 * BETA_SCALE);  /* fast convergence */
	else
		ca->last_max_cwnd = w;
	next = (w * BETA) / BETA_SCALE;
	return next < 2 ? 2 : next;
}

SEC("struct_ops")
void BPF_PROG(dc_set_state, struct sock *sk, __u8 new_state)
{
	struct dilated_cubic *ca = state(sk);

	if (new_state == TCP_CA_Loss) {
		reset(ca);
		hystart_reset(sk, ca);
	}
}

static __always_inline __u32 ack_delay(struct sock *sk, struct dilated_cubic *ca)
{
	__u64 rate = sk->sk_pacing_rate, real;
	__u32 virt;

	if (!rate)
		return 0;
	real = (__u64)sk->sk_gso_max_size * 4 * 1000000 / rate;
	virt = virtual_us(ca, real);
	return virt < 1000 ? virt : 1000;
}

static __always_inline void hystart(struct sock *sk, struct dilated_cubic *ca, __u32 delay)
{
	struct tcp_sock *tp = tcp(sk);
	__u32 threshold, now;

	if (after(tp->snd_una, ca->end_seq))
		hystart_reset(sk, ca);  /* a new round (every round, whatever the window: Linux 6.14) */
	if (tp->snd_cwnd < HYSTART_LOW_WINDOW)
		return;
	/* the ACK train: ACKs closely spaced for more than half the least RTT */
	now = clock_us(sk, ca);
	if ((__s32)(now - ca->last_ack) <= (__s32)HYSTART_ACK_SPACING_US) {
		ca->last_ack = now;
		threshold = ca->delay_min + ack_delay(sk, ca);
		if (sk->sk_pacing_status == SK_PACING_NONE)
			threshold >>= 1;
		if ((__s32)(now - ca->round_start) > (__s32)threshold) {
			ca->found = 1;
			tp->snd_ssthresh = tp->snd_cwnd;
		}
	}
	/* the delay increase: after 8 samples, this round's least RTT over the floor by an eighth of it (4-16 ms) */
	if (ca->curr_rtt > delay)
		ca->curr_rtt = delay;
	if (ca->sample_cnt < HYSTART_SAMPLES) {
		ca->sample_cnt++;
	} else {
		__u32 rise = ca->delay_min >> 3;

		if (rise < HYSTART_DELAY_MIN_US)
			rise = HYSTART_DELAY_MIN_US;
		if (rise > HYSTART_DELAY_MAX_US)
			rise = HYSTART_DELAY_MAX_US;
		if (ca->curr_rtt > ca->delay_min + rise) {
			ca->found = 1;
			tp->snd_ssthresh = tp->snd_cwnd;
		}
	}
}

SEC("struct_ops")
void BPF_PROG(dc_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct tcp_sock *tp = tcp(sk);
	struct dilated_cubic *ca = state(sk);
	__u32 delay;

	if (sample->rtt_us < 0)
		return;
	/* right after a loss the samples are not the path's */
	if (ca->epoch_start && (__s32)(virtual_jiffies(ca) - ca->epoch_start) < (__s32)CONFIG_HZ)
		return;
	delay = virtual_us(ca, (__u64)sample->rtt_us);
	if (delay == 0)
		delay = 1;
	if (ca->delay_min == 0 || ca->delay_min > delay)
		ca->delay_min = delay;
	if (!ca->found && in_slow_start(tp))
		hystart(sk, ca, delay);
}

SEC("struct_ops")
__u32 BPF_PROG(dc_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops peerlab_cubic = {
	.init = (void *)dc_init,
	.ssthresh = (void *)dc_ssthresh,
	.cong_avoid = (void *)dc_cong_avoid,
	.set_state = (void *)dc_set_state,
	.undo_cwnd = (void *)dc_undo_cwnd,
	.cwnd_event = (void *)dc_cwnd_event,
	.pkts_acked = (void *)dc_acked,
	.flags = 0x1,  /* TCP_CONG_NON_RESTRICTED: a namespace may choose it without the allowed list */
	.name = "peerlab_cubic",
};
