"""The private services' fixtures, for every fault test module."""

from tests.faults.private_services import private_postgres, volatile_redis

__all__ = ["private_postgres", "volatile_redis"]
