"""Tests of the HTTP API against a real served controller."""
