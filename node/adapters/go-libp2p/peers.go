package main

// The host and its connections: TCP, Noise and Yamux only (no QUIC, WebSocket, relay, NAT port
// mapping or hole punching), no resource limits and a connection manager that never trims, so the
// network is what the plan says. One `connect` per peer however many connections libp2p holds to it,
// one `disconnect` when the last one closes; the planned dials are kept (redialled when dropped).

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/connmgr"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	libp2pnet "github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// As peerlab's own node dials (node/linkmodel.py): a failed dial is retried after 0.1 s, doubling up
// to 2 s; a dial gives up after 5 s (one into a partition gets no answer); a dropped connection is
// redialled 0.2-0.6 s later (jittered: two nodes dialling each other at once could otherwise lose
// both connections in step, again and again).
const (
	dialBackoffFirst = 100 * time.Millisecond
	dialBackoffMax   = 2 * time.Second
	dialTimeout      = 5 * time.Second
	redialAfterClose = 200 * time.Millisecond
)

type network struct {
	host  host.Host
	log   *eventLog
	names *names

	mu   sync.Mutex
	open map[peer.ID]int           // connections per peer
	down map[peer.ID]chan struct{} // closed when a peer's last connection closes
}

// hostOptions are the host's, in both contracts: the node's key, TCP, Noise and Yamux, no limits.
func hostOptions(key crypto.PrivKey) []libp2p.Option {
	return []libp2p.Option{
		libp2p.Identity(key),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ResourceManager(&libp2pnet.NullResourceManager{}),
		libp2p.ConnectionManager(&connmgr.NullConnMgr{}),
		libp2p.DisableRelay(),
		libp2p.DisableMetrics(),
	}
}

// newNetwork makes the host without listening yet (listen does, once pubsub handles its protocol),
// its connection notifications registered before any connection can come.
func newNetwork(ctx context.Context, key crypto.PrivKey, log *eventLog, names *names) (*network, error) {
	h, err := libp2p.New(append(hostOptions(key), libp2p.NoListenAddrs)...)
	if err != nil {
		return nil, err
	}
	n := &network{host: h, log: log, names: names, open: map[peer.ID]int{}, down: map[peer.ID]chan struct{}{}}
	h.Network().Notify(&libp2pnet.NotifyBundle{ConnectedF: n.connected, DisconnectedF: n.disconnected})
	return n, nil
}

func (n *network) listen(host string, port int) error {
	addr, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/%s/tcp/%d", host, port))
	if err != nil {
		return err
	}
	return n.host.Network().Listen(addr)
}

func (n *network) connected(_ libp2pnet.Network, c libp2pnet.Conn) {
	p := c.RemotePeer()
	n.mu.Lock()
	defer n.mu.Unlock()
	n.open[p]++
	if n.open[p] == 1 {
		n.log.emit("connect", "peer", n.names.of(p), "outbound", c.Stat().Direction == libp2pnet.DirOutbound)
	}
}

func (n *network) disconnected(_ libp2pnet.Network, c libp2pnet.Conn) {
	p := c.RemotePeer()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.open[p]--; n.open[p] > 0 {
		return
	}
	delete(n.open, p)
	n.log.emit("disconnect", "peer", n.names.of(p), "reason", "closed")
	if ch, ok := n.down[p]; ok {
		close(ch)
		delete(n.down, p)
	}
}

// whenDown is closed once the peer has no connection (at once if it has none now).
func (n *network) whenDown(p peer.ID) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch, ok := n.down[p]
	if !ok {
		ch = make(chan struct{})
		if n.open[p] == 0 {
			close(ch)
		} else {
			n.down[p] = ch
		}
	}
	return ch
}

// keep dials a planned peer and redials it whenever the connection drops, until ctx ends: the peer
// may start later than this node, or be killed and restarted (with the same peer id).
func (n *network) keep(ctx context.Context, node string, a address) {
	id, err := peer.Decode(a.PeerID)
	if err == nil {
		var addr ma.Multiaddr
		if addr, err = ma.NewMultiaddr(fmt.Sprintf("/ip4/%s/tcp/%d", a.Host, a.Port)); err == nil {
			n.host.Peerstore().AddAddr(id, addr, peerstore.PermanentAddrTTL)
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dial %s: %v\n", node, err)
		return
	}
	backoff := dialBackoffFirst
	for {
		if n.host.Network().Connectedness(id) != libp2pnet.Connected {
			if err := n.dial(ctx, id); err != nil {
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, dialBackoffMax)
				continue
			}
		}
		backoff = dialBackoffFirst
		select {
		case <-ctx.Done():
			return
		case <-n.whenDown(id):
		}
		if !sleep(ctx, time.Duration(float64(redialAfterClose)*(1+2*rand.Float64()))) {
			return
		}
	}
}

// dial connects once, past the swarm's own dial backoff (5 s and more after a failure, which would
// hold a restarted peer off long after it is back).
func (n *network) dial(ctx context.Context, id peer.ID) error {
	ctx, cancel := context.WithTimeout(libp2pnet.WithForceDirectDial(ctx, "planned peer"), dialTimeout)
	defer cancel()
	_, err := n.host.Network().DialPeer(ctx, id)
	return err
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (n *network) close(limit time.Duration) {
	closeHost(n.host, limit)
}

// closeHost closes a host, waiting at most `limit` (a clean close can wait on peers).
func closeHost(h host.Host, limit time.Duration) {
	done := make(chan struct{})
	go func() {
		h.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(limit):
	}
}
