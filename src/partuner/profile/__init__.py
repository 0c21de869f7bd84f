"""Measuring nodes, fused groups and links on units; the SQLite profile store; profiling kits
for remote targets and NEST-C profile files."""

from partuner.profile.groups import find_chains, parse_pattern, parse_profile_configs
from partuner.profile.measure import random_feeds, time_call
from partuner.profile.profiler import Profile, UnitProfile, profile_model
from partuner.profile.signature import model_digest, node_signature, signature_label
from partuner.profile.store import Measurement, ProfileStore, default_db_path
from partuner.profile.transfer import LinkFit, fit_link

__all__ = [
    "LinkFit",
    "Measurement",
    "Profile",
    "ProfileStore",
    "UnitProfile",
    "default_db_path",
    "find_chains",
    "fit_link",
    "model_digest",
    "node_signature",
    "parse_pattern",
    "parse_profile_configs",
    "profile_model",
    "random_feeds",
    "signature_label",
    "time_call",
]
