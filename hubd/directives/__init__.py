"""Platform directives: the HTTP endpoint, AcceptGrant, discovery and report state, control, and replay."""
