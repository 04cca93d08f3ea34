"""Offline cost preview: run the Pulumi program under mocks, price every resource, diff two runs."""
