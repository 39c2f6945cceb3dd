// peerlab node contract v1 (docs/node-contract.md) for js-libp2p's GossipSub.
//
//   node adapter.mjs --config FILE
//
// Reads the contract config, starts a libp2p host (TCP, Noise, Yamux, Identify, GossipSub) with the
// identity derived from the config's seed, dials the planned peers, subscribes, publishes the
// schedule from T0 and writes the contract's events as JSON lines. SIGTERM stops it cleanly.
// Duplicates and per-RPC counts are logged by wrapping three methods of the running GossipSub
// object (validateReceivedMessage, sendRpc/sendRpcInBatch, handleReceivedRpc): private names,
// which is why the lock file pins the versions.
import { readFileSync, openSync, writeSync } from 'node:fs'
import { randomFillSync } from 'node:crypto'
import { RPC } from '@libp2p/gossipsub/message'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { nowNs } from './clock.mjs'
import { createNode } from './host.mjs'

const configPath = process.argv[process.argv.indexOf('--config') + 1]
if (!process.argv.includes('--config') || !configPath) {
  console.error('usage: node adapter.mjs --config FILE')
  process.exit(2)
}
const cfg = JSON.parse(readFileSync(configPath, 'utf8'))
if (cfg.contract !== 1) {
  console.error(`adapter speaks contract 1, the config is contract ${cfg.contract}`)
  process.exit(2)
}

// events ------------------------------------------------------------------------------------------
const log = openSync(cfg.event_log, 'a')
function emit (type, fields = {}) {
  const body = JSON.stringify({ node: cfg.node_id, type, ...fields })
  writeSync(log, `{"ts":${nowNs()},${body.slice(1)}\n`)
}

// peer id -> node id, for origins and senders
const nodeOf = new Map(Object.entries(cfg.peer_ids).map(([node, pid]) => [pid, node]))
const nodeName = (peerId) => nodeOf.get(peerId.toString()) ?? peerId.toString()

// parameters: peerlab's GossipSub names -> js-libp2p's options (seconds -> milliseconds)
const SECONDS = new Set(['heartbeat_interval', 'fanout_ttl', 'seen_ttl', 'prune_backoff', 'unsubscribe_backoff'])
const OPTION = {
  D: 'D', D_lo: 'Dlo', D_hi: 'Dhi', D_lazy: 'Dlazy', D_out: 'Dout', D_score: 'Dscore',
  heartbeat_interval: 'heartbeatInterval', fanout_ttl: 'fanoutTTL', seen_ttl: 'seenTTL',
  history_length: 'mcacheLength', history_gossip: 'mcacheGossip', gossip_factor: 'gossipFactor',
  flood_publish: 'floodPublish', prune_backoff: 'pruneBackoff', unsubscribe_backoff: 'unsubcribeBackoff',
  idontwant_threshold: 'idontwantMinDataSize', max_ihave_length: 'maxIHaveLength',
  max_ihave_messages: 'maxIHaveMessages'
}
const options = {}
for (const [name, value] of Object.entries(cfg.params)) {
  if (!(name in OPTION)) {
    console.error(`js-libp2p adapter: no parameter ${name} (it takes: ${Object.keys(OPTION).join(', ')})`)
    process.exit(2)
  }
  options[OPTION[name]] = SECONDS.has(name) ? value * 1000 : value
}

// Ids on the wire are go-libp2p-pubsub's default, from || seqno: the origin's peer id (its multihash
// bytes) then the 8-byte big-endian sequence number, with StrictSign. @libp2p/gossipsub's own default
// puts the public key's protobuf (two bytes shorter) where the peer id goes, so in a network mixed with
// go, rust or py nodes its IHAVE/IWANT/IDONTWANT ids would name nothing the others know: set here. The
// event log names a message by its payload up to the first newline (the contract's payload format),
// the same in every implementation.
function msgIdFn (msg) {
  if (msg.type !== 'signed' || msg.sequenceNumber == null) throw new Error('StrictSign: a message without from and seqno')
  const from = msg.from.toMultihash().bytes
  const id = new Uint8Array(from.length + 8)
  id.set(from)
  new DataView(id.buffer).setBigUint64(from.length, msg.sequenceNumber)
  return id
}
const NEWLINE = 10
const decoder = new TextDecoder()
const label = (data) => {
  if (!data) return ''
  const end = data.indexOf(NEWLINE)
  return decoder.decode(end < 0 ? data : data.subarray(0, end))
}

const privateKey = await generateKeyPairFromSeed('Ed25519', Buffer.from(cfg.identity_seed, 'hex'))
const node = await createNode({
  privateKey,
  listen: `/ip4/${cfg.listen.host}/tcp/${cfg.listen.port}`,
  pubsub: { msgIdFn, ...options }
})
const pubsub = node.services.pubsub

// first copies, duplicates (with their sender), RPC counts ------------------------------------------
pubsub.addEventListener('gossipsub:message', (evt) => {
  const { propagationSource, msg } = evt.detail
  emit('deliver_message', {
    topic: msg.topic, msg_id: label(msg.data), origin: msg.from ? nodeName(msg.from) : '', peer: nodeName(propagationSource),
    size: msg.data.length
  })
})
const validate = pubsub.validateReceivedMessage.bind(pubsub)
pubsub.validateReceivedMessage = async (from, rpcMsg) => {
  const result = await validate(from, rpcMsg)
  if (result.code === 'duplicate') {
    emit('duplicate_message', { topic: rpcMsg.topic, msg_id: label(rpcMsg.data), peer: nodeName(from), size: rpcMsg.data?.length ?? 0 })
  }
  return result
}
// the contract's counts: message ids announced (ihave, iwant, idontwant), topics (graft, prune)
const ids = (entries) => (entries ?? []).reduce((sum, e) => sum + (e.messageIDs?.length ?? 0), 0)
function counts (rpc) {
  const c = rpc.control ?? {}
  const data = (rpc.messages ?? []).reduce((sum, m) => sum + (m.data?.length ?? 0), 0)
  return {
    data_bytes: data, msgs: rpc.messages?.length ?? 0, subs: rpc.subscriptions?.length ?? 0,
    ihave: ids(c.ihave), iwant: ids(c.iwant), idontwant: ids(c.idontwant),
    graft: c.graft?.length ?? 0, prune: c.prune?.length ?? 0
  }
}
const peerName = (id) => nodeOf.get(id) ?? id
const sendRpc = pubsub.sendRpc.bind(pubsub)
pubsub.sendRpc = (id, rpc) => {
  const sent = sendRpc(id, rpc) // piggybacks pending control onto rpc before encoding it
  if (sent) emit('send_rpc', { peer: peerName(id), bytes: RPC.encode(rpc).length, ...counts(rpc) })
  return sent
}
const sendRpcInBatch = pubsub.sendRpcInBatch.bind(pubsub)
pubsub.sendRpcInBatch = (tosend, rpc) => {
  sendRpcInBatch(tosend, rpc) // drops the peers it could not send to from `tosend`
  const bytes = RPC.encode(rpc).length
  const c = counts(rpc)
  for (const id of tosend) emit('send_rpc', { peer: peerName(id), bytes, ...c })
}
const received = pubsub.handleReceivedRpc.bind(pubsub)
pubsub.handleReceivedRpc = async (from, rpc) => {
  emit('recv_rpc', { peer: nodeName(from), bytes: RPC.encode(rpc).length, ...counts(rpc) })
  return received(from, rpc)
}

// connections: one connect per peer (libp2p may hold several connections to it) ----------------------
const open = new Map()
node.addEventListener('connection:open', (evt) => {
  const peer = evt.detail.remotePeer.toString()
  open.set(peer, (open.get(peer) ?? 0) + 1)
  if (open.get(peer) === 1) emit('connect', { peer: nodeName(peer), outbound: evt.detail.direction === 'outbound' })
})
node.addEventListener('connection:close', (evt) => {
  const peer = evt.detail.remotePeer.toString()
  const left = (open.get(peer) ?? 1) - 1
  if (left > 0) { open.set(peer, left); return }
  open.delete(peer)
  emit('disconnect', { peer: nodeName(peer), reason: 'closed' })
})

// the process's CPU time and resident memory, every resources_interval seconds (as peerlab's node)
const interval = (cfg.resources_interval ?? 1) * 1000
const sampler = interval > 0
  ? setInterval(() => {
    const cpu = process.cpuUsage()
    emit('resources', { cpu_s: (cpu.user + cpu.system) / 1e6, rss_bytes: process.memoryUsage.rss() })
  }, interval)
  : null

// lifecycle ---------------------------------------------------------------------------------------
let stopping = false
async function stop (reason) {
  if (stopping) return
  stopping = true
  emit('stop', { reason })
  timers.forEach(clearTimeout)
  if (sampler) clearInterval(sampler)
  await node.stop()
  process.exit(0)
}
process.on('SIGTERM', () => stop('SIGTERM'))
process.on('SIGINT', () => stop('SIGINT'))

await node.start()
emit('start', { protocol: cfg.protocol })
emit('behaviour', { behaviour: 'honest' })
for (const topic of cfg.subscriptions) {
  pubsub.subscribe(topic)
  emit('join', { topic })
}

const timers = []
const t0 = cfg.t0_ns / 1e6 // ms on this machine's clock
const at = (offsetS, fn) => timers.push(setTimeout(fn, Math.max(0, t0 + offsetS * 1000 - Date.now())))
emit('t0', { t0: cfg.t0_ns })
cfg.schedule.forEach(([offset, topic, size], index) => {
  if (t0 + offset * 1000 < Date.now()) return // a restarted node skips what it missed
  at(offset, () => {
    const seq = index + 1 // ids stay unique across restarts: the schedule is the same
    const msgId = `${cfg.node_id}-${seq}`
    const data = new Uint8Array(Math.max(size, msgId.length + 1))
    data.set(new TextEncoder().encode(msgId + '\n'))
    randomFillSync(data, msgId.length + 1)
    emit('publish_message', { topic, msg_id: msgId, size: data.length, seq })
    pubsub.publish(topic, data).catch((err) => emit('publish_refused', { topic, msg_id: msgId, reason: err.message }))
  })
})
for (const [offset, topic] of cfg.late_subscriptions) {
  at(offset, () => { pubsub.subscribe(topic); emit('join', { topic }) })
}
// dial: a peer not up yet is retried (it may start later or be restarting)
async function dial (peer, attempt = 0) {
  if (stopping) return
  try {
    await node.dial(multiaddr(`/ip4/${peer.host}/tcp/${peer.port}/p2p/${peer.peer_id}`))
  } catch (err) {
    if (attempt < 20) setTimeout(() => dial(peer, attempt + 1), Math.min(2000, 100 * 2 ** attempt))
    else console.error(`dial ${peer.node}: ${err.message}`)
  }
}
for (const id of cfg.dial) dial({ node: id, ...cfg.peers[id] })
emit('ready', {})
