"""PulsarCast: its core, its dissemination trees over the DHT, and its wire schema."""
