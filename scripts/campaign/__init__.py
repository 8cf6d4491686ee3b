"""The parts of scripts/crash_campaign.py: the child step (``child``), how children are
started and killed (``launchers``), one run driven to its end under kills (``rounds``) and
what is counted (``report``)."""
