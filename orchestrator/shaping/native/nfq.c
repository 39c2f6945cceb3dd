/* The netlink side of NFQUEUE: a queue socket bound and configured in the calling thread's network
 * namespace (copy the IPv4 header only, GSO packets whole, a long queue, fail-closed), the probe,
 * and verdict messages (several go into one buffer, and out in one sendmsg). */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#include "delayline.h"

#define RCVBUF (32 << 20) /* unread packet messages while a worker is busy elsewhere */
#define PROBE_QUEUE 60000

static const struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};

int nfq_send(int fd, const char *buf, size_t len)
{
    while (sendto(fd, buf, len, 0, (const struct sockaddr *)&kernel, sizeof kernel) < 0)
        if (errno != EINTR)
            return -1;
    return 0;
}

size_t nfq_put_verdict(char *buf, uint16_t queue_num, uint32_t id, int verdict, bool batch)
{
    struct nlmsghdr *nlh = nfq_nlmsg_put(buf, batch ? NFQNL_MSG_VERDICT_BATCH : NFQNL_MSG_VERDICT, queue_num);
    nfq_nlmsg_verdict_put(nlh, id, verdict);
    return MNL_ALIGN(nlh->nlmsg_len);
}

static void say(char *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, ERR_LEN, fmt, ap);
    va_end(ap);
}

static int config_failed(char *err, const char *what) /* errno stays the kernel's answer */
{
    int e = errno;
    say(err, "%s: %s", what, strerror(e));
    errno = e;
    return -1;
}

/* Send one configuration message and wait for the kernel's acknowledgement. */
static int configure(int fd, uint32_t portid, struct nlmsghdr *nlh, const char *what, char *err)
{
    static uint32_t seq;
    char buf[8192];
    nlh->nlmsg_flags |= NLM_F_ACK;
    nlh->nlmsg_seq = ++seq;
    if (nfq_send(fd, (char *)nlh, nlh->nlmsg_len) < 0)
        return config_failed(err, what);
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR)
            continue;
        int done = n < 0 ? -1 : mnl_cb_run(buf, n, nlh->nlmsg_seq, portid, NULL, NULL);
        if (done < 0)
            return config_failed(err, what);
        if (done == MNL_CB_STOP)
            return 0;
    }
}

static int bind_cmd(int fd, uint32_t portid, uint16_t queue_num, uint8_t cmd, char *err)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    struct nlmsghdr *nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, queue_num);
    nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, cmd);
    if (configure(fd, portid, nlh, cmd == NFQNL_CFG_CMD_BIND ? "binding the queue" : "unbinding the queue", err) == 0)
        return 0;
    if (errno == EPERM) /* the kernel says so for a queue another socket has bound, too */
        snprintf(err + strlen(err), ERR_LEN - strlen(err), " (no CAP_NET_ADMIN, or another process has bound "
                 "queue %u in that namespace)", queue_num);
    return -1;
}

static int open_socket(uint32_t *portid, char *err)
{
    struct sockaddr_nl addr = {.nl_family = AF_NETLINK};
    socklen_t len = sizeof addr;
    struct timeval timeout = {.tv_sec = 5};
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
    if (fd < 0) {
        say(err, "netlink socket: %s", strerror(errno));
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || getsockname(fd, (struct sockaddr *)&addr, &len) < 0) {
        say(err, "netlink bind: %s", strerror(errno));
        close(fd);
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout); /* acknowledgements only */
    *portid = addr.nl_pid;
    return fd;
}

int nfq_open_queue(struct queue *q, uint16_t queue_num, char *err)
{
    char buf[MNL_SOCKET_BUFFER_SIZE];
    int one = 1, size = RCVBUF;
    if ((q->fd = open_socket(&q->portid, err)) < 0)
        return -1;
    if (setsockopt(q->fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) < 0)
        setsockopt(q->fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof size); /* without CAP_NET_ADMIN: up to rmem_max */
    /* a full socket buffer drops the packet (fail-closed); it must not make every later read fail */
    setsockopt(q->fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
    if (bind_cmd(q->fd, q->portid, queue_num, NFQNL_CFG_CMD_BIND, err) < 0)
        goto fail;
    struct nlmsghdr *nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, queue_num);
    nfq_nlmsg_cfg_put_params(nlh, NFQNL_COPY_PACKET, COPY_BYTES);
    nfq_nlmsg_cfg_put_qmaxlen(nlh, QUEUE_MAXLEN);
    /* GSO packets whole (one verdict for a whole burst of segments); FAIL_OPEN explicitly off */
    mnl_attr_put_u32(nlh, NFQA_CFG_FLAGS, htonl(NFQA_CFG_F_GSO));
    mnl_attr_put_u32(nlh, NFQA_CFG_MASK, htonl(NFQA_CFG_F_GSO | NFQA_CFG_F_FAIL_OPEN));
    if (configure(q->fd, q->portid, nlh, "configuring the queue", err) < 0)
        goto fail;
    return 0;
fail:
    close(q->fd);
    q->fd = -1;
    return -1;
}

int nfq_probe(char *err)
{
    uint32_t portid;
    char why[ERR_LEN];
    int fd = open_socket(&portid, why);
    if (fd >= 0 && bind_cmd(fd, portid, PROBE_QUEUE, NFQNL_CFG_CMD_BIND, why) == 0 &&
        bind_cmd(fd, portid, PROBE_QUEUE, NFQNL_CFG_CMD_UNBIND, why) == 0) {
        close(fd);
        return 0;
    }
    if (fd >= 0)
        close(fd);
    say(err, "nfnetlink_queue is not usable (%s); the kernel needs CONFIG_NETFILTER_NETLINK_QUEUE and the "
             "process CAP_NET_ADMIN", why);
    return -1;
}
