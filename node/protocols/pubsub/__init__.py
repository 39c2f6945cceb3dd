"""What the topic-based pubsub family shares (FloodSub, GossipSub): the libp2p RPC wire schema,
message ids and signatures as go-libp2p-pubsub makes them, the topic core, validators."""
