"""ScoutSubs (the SmartPubSub paper): its core, its filter tables, and its wire schema."""
