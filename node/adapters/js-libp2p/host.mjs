// The libp2p node both contracts run (adapter.mjs, interop.mjs): TCP, Noise, Yamux, Identify and
// GossipSub, no connection limit, not started; `pubsub` adds to the GossipSub options here.
import { createLibp2p } from 'libp2p'
import { tcp } from '@libp2p/tcp'
import { noise } from '@chainsafe/libp2p-noise'
import { yamux } from '@chainsafe/libp2p-yamux'
import { identify } from '@libp2p/identify'
import { gossipsub } from '@libp2p/gossipsub'

export function createNode ({ privateKey, listen, pubsub }) {
  return createLibp2p({
    privateKey,
    addresses: { listen: [listen] },
    transports: [tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [yamux()],
    connectionManager: { maxConnections: 10000 },
    services: {
      identify: identify(),
      pubsub: gossipsub({ emitSelf: false, allowPublishToZeroTopicPeers: true, fallbackToFloodsub: false, ...pubsub })
    },
    start: false
  })
}
