"""cli/views"""
