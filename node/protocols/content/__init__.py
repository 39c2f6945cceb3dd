"""Content-based subscriptions (the SmartPubSub paper): predicates over a message's attributes, and
the index that matches them, shared by ScoutSubs, FastDelivery and the DHT core."""
