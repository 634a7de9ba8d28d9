"""Token estimates for requests whose upstream reported no usage, off the event loop."""
