"""Static overlays (the CD-MAX paper's and their baselines): gossip over a topology fixed by the
scenario, and the overlay wire schema Topiary shares."""
