"""The relay: the /v1/* handler (auth, rejections) and the forwarding of one request."""
