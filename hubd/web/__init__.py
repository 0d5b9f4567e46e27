"""The HTTP server (listeners, connections, local peers) and what route sources share: client address, JSON body."""
