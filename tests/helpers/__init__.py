"""Helpers the kit's own tests share: recorded traffic, a scripted engine, servers."""
