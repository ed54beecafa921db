"""Campaigns: a bring-up sweep over variants of one profile, decided by measurement against an incumbent."""
