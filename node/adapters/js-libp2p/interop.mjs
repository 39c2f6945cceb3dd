// The js-libp2p adapter's second mode: gossipsub-interop's contract (libp2p/test-plans,
// gossipsub-interop; docs/interop.md), so the same node runs in their Shadow experiments and in
// peerlab through node/interop's shim.
//
//   node/adapters/js-libp2p/interop-node --params params.json   (this file on the adapter's Node 22)
//
// The host and library are adapter.mjs's; what that contract fixes is done as it says: the node id
// from the host name `node<ID>`, the Ed25519 key seeded by the id (little endian), TCP port 9000, peers
// reached by their host names, messages unsigned (StrictNoSign) with their first 8 bytes as id (big
// endian, logged in base 10), GossipSub's parameters by go-libp2p-pubsub's names (times in nanoseconds;
// those js-libp2p has no option for keep its behaviour, said on stderr), and stdout as JSON lines:
// `PeerID` at start, `Received Message` for every copy received (a first copy once validated). The
// script's instructions run in order; `waitUntil` counts whole seconds from the process's start.
import { readFileSync } from 'node:fs'
import { hostname } from 'node:os'
import { lookup } from 'node:dns/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import { randomFillSync } from 'node:crypto'
import { StrictNoSign, TopicValidatorResult } from '@libp2p/gossipsub'
import { generateKeyPairFromSeed } from '@libp2p/crypto/keys'
import { multiaddr } from '@multiformats/multiaddr'
import { rfc3339 } from './clock.mjs'
import { createNode } from './host.mjs'

const PORT = 9000
const CONNECT_FOR_MS = 10_000 // a refused dial is retried this long (a peer may start a moment later)
const INSTRUCTIONS = 'connect, ifNodeIDEquals, waitUntil, subscribeToTopic, setTopicValidationDelay, initGossipSub and publish'

function refuse (message) {
  console.error(`js-libp2p adapter: ${message}`)
  process.exit(2)
}

const path = process.argv[process.argv.indexOf('--params') + 1]
if (!process.argv.includes('--params') || !path) refuse('usage: interop-node --params params.json')
let script
try {
  script = JSON.parse(readFileSync(path, 'utf8')).script
} catch (err) {
  refuse(`params ${path}: ${err.message}`)
}
if (!Array.isArray(script)) refuse(`params ${path}: no "script" list`)
const named = /^node(\d+)$/.exec(hostname())
if (!named) refuse(`the host name ${JSON.stringify(hostname())} is not node<ID> (the gossipsub-interop contract names every node so)`)
const me = Number(named[1])

const say = (msg, fields) => process.stdout.write(JSON.stringify({ time: rfc3339(), level: 'INFO', msg, ...fields }) + '\n')

// go-libp2p-pubsub's GossipSubParams field -> [js-libp2p's option, nanoseconds to milliseconds?]
const GO_NAMES = {
  D: ['D', false], Dlo: ['Dlo', false], Dhi: ['Dhi', false], Dlazy: ['Dlazy', false], Dout: ['Dout', false],
  Dscore: ['Dscore', false], HeartbeatInterval: ['heartbeatInterval', true], FanoutTTL: ['fanoutTTL', true],
  HistoryLength: ['mcacheLength', false], HistoryGossip: ['mcacheGossip', false], GossipFactor: ['gossipFactor', false],
  PruneBackoff: ['pruneBackoff', true], UnsubscribeBackoff: ['unsubcribeBackoff', true],
  IDontWantMessageThreshold: ['idontwantMinDataSize', false], MaxIHaveLength: ['maxIHaveLength', false],
  MaxIHaveMessages: ['maxIHaveMessages', false]
}
// go's fields with no js-libp2p option: accepted, the library's behaviour stands
const GO_ONLY = new Set(['HeartbeatInitialDelay', 'SlowHeartbeatWarning', 'GossipRetransmission', 'PrunePeers',
  'Connectors', 'MaxPendingConnections', 'ConnectionTimeout', 'DirectConnectTicks', 'DirectConnectInitialDelay',
  'OpportunisticGraftTicks', 'OpportunisticGraftPeers', 'GraftFloodThreshold', 'IWantFollowupTime',
  'IDontWantMessageTTL', 'MaxIDontWantLength', 'MaxIDontWantMessages'])

/** The instruction meant for this node: ifNodeIDEquals unwrapped, or null. */
function own (instruction) {
  while (instruction?.type === 'ifNodeIDEquals') {
    if (instruction.nodeID !== me) return null
    instruction = instruction.instruction
  }
  return instruction ?? null
}
const mine = script.map(own).filter(Boolean)
const RUNS = new Set(['connect', 'waitUntil', 'subscribeToTopic', 'setTopicValidationDelay', 'initGossipSub', 'publish'])
const other = mine.find((instruction) => !RUNS.has(instruction.type))
if (other) refuse(`instruction ${JSON.stringify(other.type)}: this adapter runs ${INSTRUCTIONS}`)

const options = {}
const delays = new Map() // topic -> validation delay (ms)
for (const instruction of mine) {
  if (instruction.type === 'initGossipSub') {
    for (const [name, value] of Object.entries(instruction.gossipSubParams ?? {})) {
      if (value === null) continue
      if (name in GO_NAMES) {
        const [option, nanoseconds] = GO_NAMES[name]
        options[option] = nanoseconds ? value / 1e6 : value
      } else if (GO_ONLY.has(name)) {
        console.error(`js-libp2p adapter: initGossipSub ${name}: js-libp2p has no such option; its behaviour stands`)
      } else {
        refuse(`initGossipSub: go-libp2p-pubsub's GossipSubParams has no field ${name}`)
      }
    }
  } else if (instruction.type === 'setTopicValidationDelay') {
    delays.set(instruction.topicID, instruction.delaySeconds * 1000)
  }
}

const keyOf = (id) => {
  const seed = new Uint8Array(32)
  new DataView(seed.buffer).setBigUint64(0, BigInt(id), true)
  return generateKeyPairFromSeed('Ed25519', seed)
}
const idOf = (data) => data.subarray(0, 8)
const decimal = (data) => data.length >= 8
  ? new DataView(data.buffer, data.byteOffset, 8).getBigUint64(0).toString()
  : new TextDecoder().decode(data)

const node = await createNode({
  privateKey: await keyOf(me),
  listen: `/ip4/0.0.0.0/tcp/${PORT}`,
  pubsub: { globalSignaturePolicy: StrictNoSign, msgIdFn: (msg) => idOf(msg.data), ...options }
})
const pubsub = node.services.pubsub
const received = (data, from, topic) => say('Received Message', { id: decimal(data), from: from.toString(), topic })
pubsub.addEventListener('gossipsub:message', (evt) => { // a first copy, once validated
  const { propagationSource, msg } = evt.detail
  received(msg.data, propagationSource, msg.topic)
})
const validate = pubsub.validateReceivedMessage.bind(pubsub)
pubsub.validateReceivedMessage = async (from, rpcMsg) => {
  const result = await validate(from, rpcMsg)
  if (result.code === 'duplicate') received(rpcMsg.data ?? new Uint8Array(), from, rpcMsg.topic)
  return result
}
for (const [topic, ms] of delays) {
  pubsub.topicValidators.set(topic, async () => { await sleep(ms); return TopicValidatorResult.Accept })
}
process.on('SIGTERM', () => process.exit(0))
process.on('SIGINT', () => process.exit(0))
await node.start()
say('PeerID', { id: node.peerId.toString(), node_id: me })

async function dial (target) {
  const peer = (await keyOf(target)).publicKey.toString()
  const deadline = Date.now() + CONNECT_FOR_MS
  for (let wait = 100; ; wait = Math.min(2000, 2 * wait)) {
    try {
      const { address } = await lookup(`node${target}`, { family: 4 })
      await node.dial(multiaddr(`/ip4/${address}/tcp/${PORT}/p2p/${peer}`))
      return
    } catch (err) {
      if (Date.now() > deadline) {
        console.error(`connect to node${target}: ${err.message}`)
        return
      }
      await sleep(wait)
    }
  }
}

for (const instruction of mine) {
  switch (instruction.type) {
    case 'initGossipSub':
    case 'setTopicValidationDelay':
      break // read before the host started
    case 'connect':
      await Promise.all(instruction.connectTo.map(dial))
      break
    case 'waitUntil':
      await sleep(Math.max(0, instruction.elapsedSeconds * 1000 - performance.now()))
      break
    case 'subscribeToTopic':
      pubsub.subscribe(instruction.topicID)
      break
    case 'publish': {
      const data = new Uint8Array(Math.max(8, instruction.messageSizeBytes))
      randomFillSync(data, 8)
      new DataView(data.buffer).setBigUint64(0, BigInt(instruction.messageID))
      pubsub.publish(instruction.topicID, data).catch((err) => console.error(`publish ${instruction.messageID}: ${err.message}`))
      break
    }
  }
}
