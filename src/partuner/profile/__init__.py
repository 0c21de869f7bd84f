"""Measuring nodes on units, the call overhead, links; the SQLite profile store."""

from partuner.profile.measure import handoff_latency_us, random_feeds, time_call
from partuner.profile.profiler import Profile, UnitProfile, profile_model
from partuner.profile.signature import node_signature, signature_label
from partuner.profile.store import Measurement, ProfileStore, default_db_path

__all__ = [
    "Measurement",
    "Profile",
    "ProfileStore",
    "UnitProfile",
    "default_db_path",
    "handoff_latency_us",
    "node_signature",
    "profile_model",
    "random_feeds",
    "signature_label",
    "time_call",
]
