"""profile"""
