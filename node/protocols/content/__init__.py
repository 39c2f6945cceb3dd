"""Content-based subscriptions (the SmartPubSub paper): predicates over a message's attributes, and
the index that matches them, shared by ScoutSubs, FastDelivery and the DHT core.

May import: nothing of peerlab outside itself (intervaltree only); the DHT cores import it.
"""
