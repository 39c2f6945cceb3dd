"""FastDelivery (the SmartPubSub paper): its core and its attribute boards, and its wire schema."""
